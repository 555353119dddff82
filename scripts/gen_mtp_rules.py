"""Derive which target state each engine feeds an MTP head; write engines/mtp_rules.json.

    python scripts/gen_mtp_rules.py WHEEL_DIR [--out FILE] [--check]

WHEEL_DIR holds ``sglang-X-*.whl`` and ``vllm-X-*.whl`` (``pip download --no-deps``). Nothing
is imported: files are read with zipfile and ast / regular expressions. An MTP (NextN) head
reads one target state, the one its engine hands the draft worker; per release:

SGLang (``layers/logits_processor.py``): the state stored for the draft worker is the
``hidden_states`` the target model passes to its logits processor, unless the model also
passes ``hidden_states_before_norm=`` (then that one is preferred: "when
hidden_states_before_norm is provided, we always prefer to return it"). ``prefers_before_norm``
records that sentence's presence.

vLLM (``v1/worker/gpu/model_runner.py`` and ``v1/worker/gpu_model_runner.py``): without aux
states (MTP asks for none) the drafter gets the ``hidden_states`` the target's ``forward``
returns, unless the target class defines ``get_mtp_target_hidden_states`` (V1: the runner's
``getattr(self.get_model(), "get_mtp_target_hidden_states", ...)``, ``hook_v1``; V2 from 0.32.0:
``spec_decode/utils.get_drafter_hidden_states``, ``hook_v2``). Every class of the wheel that
defines it (DeepSeek-V4, V4.1, Qwen4-exp under ``vllm/models/``) is ``own``.

Per target architecture (SGLang: a model file's ``EntryClass``; vLLM: ``models/registry.py``):
``final_norm`` where the file's model ends on ``hidden_states ... = self.norm(hidden_states``
(SGLang 0.5.21 ``residual_batch.norm(hidden_states, forward_batch, self.norm)``, from 0.5.22
``residual_batch.final_norm(...)``, both returning the normalized tensor:
the state returned to the logits processor is the final norm's output) and has no own
hook; ``own`` where it has one (SGLang ``hidden_states_before_norm=``, vLLM
``get_mtp_target_hidden_states``: not followed, refused); absent (not read) otherwise. MTP draft
architectures (files ``*_mtp.py`` / ``*_nextn.py``) and the norms their head applies to the two
inputs (``self.hnorm(`` / ``self.enorm(`` / ``self.pre_fc_norm_hidden(`` ...) are listed per
release.

llama.cpp's MTP state (``t_h_nextn``) is read by ``gen_llamacpp_rules.py`` (its ``archs``
rows); mlx-vlm and mlx-lm are not read (docs/mtp.md).

``--check`` compares with the existing file and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from release_scan import fold, version_key, write_or_check  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/mtp_rules.json"
NORM_END = re.compile(
    r"hidden_states(?:, _)? = (?:self\.norm\(\s*hidden_states|"
    r"residual_batch\.(?:final_)?norm\(\s*hidden_states,\s*forward_batch,\s*self\.norm\b)"
)
HEAD_NORMS = re.compile(
    r"self\.(hnorm|enorm|pre_fc_norm_hidden|pre_fc_norm_embedding|hidden_layernorm|"
    r"embed_layernorm|hidden_norm|embed_norm)\("
)
SGLANG_PREFERS = "when hidden_states_before_norm is provided, we always"


def _entries(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
        ):
            value = node.value
            values = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return [v.id for v in values if isinstance(v, ast.Name)]
    return []


def _is_mtp(name: str) -> bool:
    stem = name.rsplit("/", 1)[-1].removesuffix(".py")
    return stem.endswith(("_mtp", "_nextn"))


def _kind(text: str, hook: str) -> str | None:
    if hook in text:
        return "own"
    if NORM_END.search(text):
        return "final_norm"
    return None


def _norms(text: str) -> list[str]:
    return sorted(set(HEAD_NORMS.findall(text)))


def derive_sglang(path: Path) -> dict[str, Any]:
    targets: dict[str, str] = {}
    drafts: dict[str, list[str]] = {}
    with zipfile.ZipFile(path) as z:
        lp = z.read("sglang/srt/layers/logits_processor.py").decode(errors="replace")
        for name in sorted(z.namelist()):
            if not (name.startswith("sglang/srt/models/") and name.endswith(".py")):
                continue
            text = z.read(name).decode(errors="replace")
            archs = _entries(text)
            if _is_mtp(name):
                for a in archs:
                    drafts[a] = _norms(text)
                continue
            kind = _kind(text, "hidden_states_before_norm=")
            if kind is not None:
                for a in archs:
                    targets[a] = kind
    return {
        "file": "sglang/srt/layers/logits_processor.py",
        "prefers_before_norm": SGLANG_PREFERS in " ".join(lp.replace("#", " ").split()),
        "drafts": drafts,
        "targets": dict(sorted(targets.items())),
    }


REGISTRY = re.compile(r'"(\w+)": \(\s*"(\w+)",\s*"(\w+)"', re.S)


def _hook_classes(text: str, method: str) -> list[str]:
    """The classes of ``text`` that define ``method``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.FunctionDef) and f.name == method for f in node.body)
    ]


VLLM_HOOK = "get_mtp_target_hidden_states"


def derive_vllm(path: Path) -> dict[str, Any]:
    targets: dict[str, str] = {}
    drafts: dict[str, list[str]] = {}
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        registry = z.read("vllm/model_executor/models/registry.py").decode()
        v2 = "vllm/v1/worker/gpu/model_runner.py"
        v1 = "vllm/v1/worker/gpu_model_runner.py"
        runner2 = z.read(v2).decode() if v2 in names else ""
        runner1 = z.read(v1).decode() if v1 in names else ""
        own: set[str] = set()
        for name in sorted(names):
            if name.startswith("vllm/") and name.endswith(".py"):
                text = z.read(name).decode(errors="replace")
                if f"def {VLLM_HOOK}" in text:
                    own.update(_hook_classes(text, VLLM_HOOK))
        texts: dict[str, str] = {}
        for arch, module, cls in REGISTRY.findall(registry):
            file = f"vllm/model_executor/models/{module}.py"
            if cls in own:
                targets[arch] = "own"
                continue
            if file not in names:
                continue
            if file not in texts:
                texts[file] = z.read(file).decode(errors="replace")
            text = texts[file]
            if _is_mtp(file):
                drafts[arch] = _norms(text)
                continue
            kind = _kind(text, f"def {VLLM_HOOK}")
            if kind is not None:
                targets[arch] = kind
        for cls in own:
            targets.setdefault(cls, "own")
    return {
        "file": "vllm/v1/worker/gpu/model_runner.py, vllm/v1/worker/gpu_model_runner.py",
        "hook_v1": f'"{VLLM_HOOK}"' in runner1,
        "hook_v2": "get_drafter_hidden_states(self.model" in runner2,
        "drafts": dict(sorted(drafts.items())),
        "targets": dict(sorted(targets.items())),
    }


def _version(path: Path) -> str:
    found = re.match(r"(?:sglang|vllm)-(.+?)-(?:py3|cp3)", path.name)
    assert found, path.name
    return found.group(1)


def table(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"generator": "scripts/gen_mtp_rules.py"}
    for project, pattern, derive_one in (
        ("sglang", "sglang-*.whl", derive_sglang),
        ("vllm", "vllm-*.whl", derive_vllm),
    ):
        files = sorted(folder.glob(pattern), key=lambda p: version_key(_version(p)))
        facts = []
        for path in files:
            facts.append((_version(path), derive_one(path)))
            print(project, _version(path), "read", file=sys.stderr)
        out[project] = {"releases": [v for v, _ in facts], "rows": fold(facts)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    return write_or_check(table(args.wheels), args.out, args.check, f"the files in {args.wheels}")


if __name__ == "__main__":
    raise SystemExit(main())
