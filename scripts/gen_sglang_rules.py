"""Derive SGLang's EAGLE-3 capture rules from its release wheels; write engines/sglang_rules.json.

    python scripts/gen_sglang_rules.py WHEEL_DIR [--out FILE] [--check]

WHEEL_DIR holds ``sglang-X-*.whl`` for every release (``tests/download_sglang_wheels.py``
fetches them). Each wheel is read with zipfile and ast (sglang is never imported; see
``sglang_wheel.py``). Per release and registered architecture whose class has
``set_eagle3_layers_to_capture``:

- ``rule``: the id -> capture index rule, found by running the release's own method on
  probe ids and matching the outcomes against the rules ``engines/sglang_table.py`` applies
  (``apply_rule``); ``unfollowed`` where the method delegates to a model chosen at load time;
- ``site``: where the capturing forward takes the state (the layer loop before layer i, the
  layer communicator after ``prepare_attn``, the layer boundary), and so ``index0``: what
  capture index 0 gives (``embed``, or ``error``: ``hidden_states + residual`` with residual
  None); ``none`` where the forward never captures (draft and MTP classes);
- ``beyond``: what an index >= L does (``dropped`` silently, ``raises`` at the first forward,
  ``final``: index L is captured after the loop);
- per release, whether CUDA graphs are captured with the default ids (EC514).

Consecutive releases with equal facts become one row. ``--check`` compares with the existing
file and exits 1 on any difference; the generator also exits 1 when an architecture's rule or
capture site is not one it knows (a new release needs a look).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import sglang_forward as sf  # noqa: E402
import sglang_wheel as sw  # noqa: E402

from pytest_eagle_contract.engines.sglang_table import RULES, apply_rule  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/sglang_rules.json"
L = sw.PROBE_LAYERS
PROBES: tuple[list[int] | None, ...] = (
    None,
    [1, 29, 57],
    [2, 30, 58],
    [58, 2, 30],
    [0, 30, 60],
    [2, 30, 61],
    [2, 30, 59],
    [1, 2, 3],
)
Facts = tuple[str, str, str, str, str, str]  # rule, site, index0, beyond, method_in, forward_in


def release_key(version: str) -> tuple[int, ...]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    if match is None:
        raise SystemExit(f"not an sglang release version: {version}")
    return tuple(int(x or 0) for x in match.groups())


def _rule(outcomes: list[object]) -> str:
    """The known rule every probe outcome agrees with, else ``unfollowed``/``unknown``."""
    if all(isinstance(o, str) and o != "IndexError" for o in outcomes):
        return "unfollowed"
    for rule in RULES:
        expected = [apply_rule(rule, ids, L) for ids in PROBES]
        if [("IndexError" if e is None else e) for e in expected] == outcomes:
            return rule
    return "unknown"


def _facts(wheel: sw.Wheel, ref: sw.ClassRef) -> Facts:
    outcomes = [sw.run(wheel, ref, None if ids is None else list(ids))[0] for ids in PROBES]
    rule = _rule(outcomes)
    _, holder = sw.run(wheel, ref, [2, 30, 58])
    method = wheel.function(ref, sw.METHOD)
    assert method is not None
    (module, cls), _ = method
    fwd = sf.forward(wheel, holder, ref)
    if rule == "unfollowed":
        return rule, "unfollowed", "unknown", "unknown", f"{module}.py:{cls}", ""
    return rule, fwd.site, fwd.index0, fwd.beyond, f"{module}.py:{cls}", fwd.forward_in


def _ranges(flags: list[tuple[str, bool]]) -> list[list[str | None]]:
    out: list[list[str | None]] = []
    for i, (version, on) in enumerate(flags):
        if on and (i == 0 or not flags[i - 1][1]):
            out.append([version, None])
        if not on and out and out[-1][1] is None:
            out[-1][1] = version
    return out


def generate(wheel_dir: Path) -> dict[str, object]:
    paths = {p.name.split("-")[1]: p for p in wheel_dir.glob("sglang-*.whl")}
    releases = sorted(paths, key=release_key)
    if not releases:
        raise SystemExit(f"no sglang-*.whl in {wheel_dir}")
    per_release: dict[str, dict[str, Facts]] = {}
    graph: list[tuple[str, bool]] = []
    digests: dict[str, str] = {}
    for version in releases:
        wheel = sw.Wheel(paths[version])
        digests[version] = hashlib.sha256(paths[version].read_bytes()).hexdigest()
        archs = wheel.architectures()
        per_release[version] = {a: _facts(wheel, ref) for a, ref in sorted(archs.items())}
        graph.append((version, wheel.graph_default and bool(archs)))
        print(f"sglang {version}: {len(archs)} architectures", file=sys.stderr)
    return {
        "generator": "scripts/gen_sglang_rules.py",
        "probe_layers": L,
        "releases": releases,
        "sha256": digests,
        "graph_default_ids": _ranges(graph),
        "rows": _rows(releases, per_release),
    }


def _rows(releases: list[str], per_release: dict[str, dict[str, Facts]]) -> list[dict[str, object]]:
    spans: dict[tuple[str | None, str | None, Facts], list[str]] = {}
    for arch in sorted({a for facts in per_release.values() for a in facts}):
        start: str | None = None
        current: Facts | None = None
        for version in [*releases, None]:
            facts = per_release[version].get(arch) if version else None
            if facts != current:
                if current is not None:
                    spans.setdefault((start, version, current), []).append(arch)
                start, current = version, facts
    rows = [
        {
            "archs": archs,
            "since": since,
            "until": until,
            **dict(zip(("rule", "site", "index0", "beyond", "method_in", "forward_in"), facts)),
        }
        for (since, until, facts), archs in spans.items()
    ]
    return sorted(rows, key=lambda r: (str(r["method_in"]), release_key(str(r["since"]))))


def problems(data: dict[str, object]) -> Iterable[str]:
    """Rows whose rule or capture site the generator does not know."""
    for row in data["rows"]:  # type: ignore[attr-defined]
        if row["rule"] == "unknown" or (row["index0"] == "unknown" and row["rule"] != "unfollowed"):
            yield f"{row['archs']} {row['since']}..{row['until']}: {row['rule']}, {row['site']}"


def render(data: dict[str, object]) -> str:
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out differs")
    args = parser.parse_args(argv)
    data = generate(args.wheels)
    text = render(data)
    unknown = list(problems(data))
    for line in unknown:
        print(f"unknown rule or capture site: {line}", file=sys.stderr)
    rows = data["rows"]
    archs = {a for row in rows for a in row["archs"]}  # type: ignore[attr-defined]
    print(
        f"{len(data['releases'])} releases, {len(archs)} architectures, {len(rows)} rows",  # type: ignore[arg-type]
        file=sys.stderr,
    )
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print("up to date" if same else f"{args.out} differs from the wheels", file=sys.stderr)
        return 0 if same and not unknown else 1
    args.out.write_text(text)
    return 1 if unknown else 0


if __name__ == "__main__":
    raise SystemExit(main())
