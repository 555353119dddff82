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

import re
import sys
from pathlib import Path
from typing import Any

import source_scan
from source_scan import Source, git

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


def derive(repo: Path, ref: str) -> dict[str, Any] | None:
    text = git(repo, "show", f"{ref}:{FILE}", check=False)
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


SOURCE = Source(
    repo="openvinotoolkit/openvino.genai",
    out=OUT,
    derive=derive,
    tags=lambda tag: re.fullmatch(r"\d{4}\.\d+\.\d+\.\d+", tag) is not None,
    extra={"file": FILE},
)


def main(argv: list[str] | None = None) -> int:
    return source_scan.main(SOURCE, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
