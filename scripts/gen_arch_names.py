"""Write engines/arch_names.json: the architectures a target's config.json may name
(``architectures[0]``) for each ``model_type``, so ``resolve --arch`` takes either spelling for
every engine.

    python scripts/gen_arch_names.py [--check]

Read from the installed transformers' own auto mappings (``models/auto/modeling_auto.py``:
image-text-to-text, multimodal LM, then causal LM, so a multimodal model_type names its
``...ForConditionalGeneration`` first, as its checkpoints' config.json does), plus the
spellings of checkpoints whose code is not in transformers (remote code) that the engines'
rules know (``engines/sglang_table.ALIASES``), tried first. ``--check`` exits 1 where the
file differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "pytest_eagle_contract/engines/arch_names.json"
MAPPINGS = (
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
)


def table() -> dict[str, object]:
    import transformers
    from transformers.models.auto import modeling_auto

    sys.path.insert(0, str(ROOT))
    from pytest_eagle_contract.engines.sglang_table import ALIASES

    names: dict[str, list[str]] = {}
    for mapping in MAPPINGS:
        for model_type, archs in getattr(modeling_auto, mapping).items():
            for arch in [archs] if isinstance(archs, str) else archs:
                names.setdefault(model_type, [])
                if arch not in names[model_type]:
                    names[model_type].append(arch)
    # remote-code checkpoints' spelling (Kimi-K2.5's config.json says
    # KimiK25ForConditionalGeneration; transformers' own class is Kimi_K25...)
    remote = {k: [v] for k, v in sorted(ALIASES.items()) if v not in names.get(k, ())}
    return {
        "transformers": transformers.__version__,
        "model_types": dict(sorted(names.items())),
        "remote_code": remote,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where the file differs")
    args = parser.parse_args(argv)
    text = json.dumps(table(), indent=1) + "\n"
    if args.check:
        same = OUT.read_text("utf-8") == text
        print(f"{OUT} {'agrees with' if same else 'differs from'} transformers", file=sys.stderr)
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
