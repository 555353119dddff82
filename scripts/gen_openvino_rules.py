"""Derive OpenVINO GenAI's EAGLE-3 rules from its source; write engines/openvino_rules.json.

    python scripts/gen_openvino_rules.py REPO [--out FILE] [--check]

REPO is a git clone of openvinotoolkit/openvino.genai. Its wheels on the index hold the
compiled library only, so the rules come from the C++ source at each release tag (the tags
are the releases' version numbers, 2026.0.0.0 on) and the commit REPO's HEAD is at, read with
``git show`` and regular expressions (nothing built):

- ``speculative_decoding/eagle3_model_transforms.cpp``: the ids are the draft model's
  ``hidden_layers_list`` property (or the draft IR's rt_info, which overrides it), never the
  draft's config.json; without them ``{2, L/2, L-3}`` from the main model's config.json
  (L >= 10 asserted); exactly 3 ids; layer k's capture is the residual Add whose friendly name
  holds ``layers.k/`` and whose second input is a MatMul of a Multiply (the MLP's
  ``down_proj``): the output of layer k; the order they are concatenated in (graph order, or
  the list's own order).

A structure the script does not recognise makes it exit 1. ``--check`` compares with the
committed file and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/openvino_rules.json"
FILE = "src/cpp/src/speculative_decoding/eagle3_model_transforms.cpp"
NEEDED = {
    "property": 'config.find("hidden_layers_list")',
    "rt_info": 'properties["hidden_layers_list"] = model->get_rt_info',
    "default": "hidden_layers_list = {2, num_decoder_layers / 2, num_decoder_layers - 3}",
    "three": "hidden_layers_list.size() == 3",
    "pattern": '"layers." + std::to_string(idx) + "/"',
    "residual": "ov::is_type<ov::op::v1::Multiply>(matmul_input)",
    "assert": "Number of extracted hidden states does not match the requested number.",
}


def _git(repo: Path, *args: str, check: bool = True) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode and check:
        raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout if out.returncode == 0 else ""


def derive(repo: Path, ref: str) -> dict[str, Any] | None:
    text = _git(repo, "show", f"{ref}:{FILE}", check=False)
    if not text:
        return None
    flat = re.sub(r"\s+", "", text)
    for what, needle in NEEDED.items():
        if re.sub(r"\s+", "", needle) not in flat:
            raise SystemExit(f"{ref}: {FILE} lacks the {what} rule ({needle})")
    least = re.search(r"num_decoder_layers >= (\d+)", text)
    if least is None:
        raise SystemExit(f"{ref}: no least layer count")
    if "find_hidden_state_outputs_by_patterns" in text and "ordered_outputs.push_back" in text:
        order = "list"
    elif "residual_outputs.push_back(node->output(0));" in text:
        order = "layer"
    else:
        raise SystemExit(f"{ref}: the captured states are ordered in an unknown way")
    return {
        "ids": "hidden_layers_list",
        "default": "2,L/2,L-3",
        "least_layers": int(least.group(1)),
        "count": 3,
        "capture": "output",
        "order": order,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("repo", type=Path, help="a git clone of openvinotoolkit/openvino.genai")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.check:
        head = json.loads(args.out.read_text("utf-8"))["snapshot"]["commit"]
    else:
        head = _git(args.repo, "rev-parse", "HEAD").strip()
    tags = [
        t
        for t in _git(args.repo, "tag", "--sort=version:refname").split()
        if re.fullmatch(r"\d{4}\.\d+\.\d+\.\d+", t)
    ]
    rows: list[dict[str, Any]] = []
    for ref in [*tags, head]:
        facts = derive(args.repo, ref)
        if facts is None:
            continue
        print(ref, "ok", file=sys.stderr)
        if rows and {k: v for k, v in rows[-1].items() if k != "refs"} == facts:
            rows[-1]["refs"].append(ref)
        else:
            rows.append({"refs": [ref], **facts})
    table = {
        "snapshot": {
            "repo": "openvinotoolkit/openvino.genai",
            "commit": head,
            "date": _git(args.repo, "log", "-1", "--format=%cs", head).strip(),
        },
        "file": FILE,
        "rows": rows,
    }
    text = json.dumps(table, indent=1) + "\n"
    if args.check:
        if args.out.read_text("utf-8") != text:
            print(f"{args.out} differs from the source", file=sys.stderr)
            return 1
        print(f"{args.out} agrees with the source", file=sys.stderr)
        return 0
    args.out.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
