"""Derive llama.cpp's EAGLE-3 rules from the llama.cpp each llama-cpp-python sdist vendors;
write engines/llamacpp_rules.json.

    python scripts/gen_llamacpp_rules.py SDIST_DIR [--out FILE] [--check] [--download]

``--download`` fetches every llama-cpp-python sdist from 0.3.28 (the last without EAGLE-3)
on (``pip download --no-deps --no-binary :all:``, about 75 MB each). Each
``llama_cpp_python-X.tar.gz`` is read with tarfile
(nothing is built or run); ``vendor/llama.cpp/`` in it is the llama.cpp of that release:

- the draft side: the GGUF key the EAGLE-3 loader reads its ids from (``src/models/eagle3.cpp``:
  ``get_arr(LLM_KV_...)``, spelled in ``src/llama-arch.cpp``), how many ids it requires, and
  the converter's rule (``conversion/llama.py`` or ``convert_hf_to_gguf.py``): which draft
  ``config.json`` key it bakes into that GGUF key, and the default it bakes without one;
- the target side (``common/speculative.cpp``): id k < L asks for the input of layer k, id L
  for the graph's ``t_h_nextn`` (``nextn``, from 0.3.35) or layer L's input (``layer_inp``),
  ids past L abort; the states are copied in the draft's list order;
- per GGUF architecture (``llama-arch.cpp`` names, ``llama-model.cpp``'s class per
  architecture, that class's graph file under ``src/models/``): whether its graph records
  each layer's input (``res->t_layer_inp[il] = inpL``: id k is ``residual:k``, id 0 the
  embedding), and what id L feeds (``last``), read in the target's own graph (the class's
  ``graph::graph`` constructor, not its MTP graph): ``residual`` (``t_h_nextn`` is the layer
  loop's output, before the output norm: ``residual:L``), ``final_norm`` (it is taken after
  ``build_norm(..., model.output_norm, ...)``), ``streams`` (the graph widens its output
  to several hyper-connection streams, ``n_embd_out_impl``, and ``t_h_nextn`` is them
  unreduced: speculative.cpp copies ``n_embd`` floats per token from rows ``n_embd_out`` wide,
  so the draft gets other tokens' streams, silently), ``zeros`` (the graph never sets
  ``t_h_nextn``: nothing is copied into the nextn buffer, which llama_context clears when it
  allocates it, and speculative.cpp's null check passes, so the draft gets zeros, silently),
  or ``abort`` (``layer_inp`` releases: ``llama_context::set_embeddings_layer_inp`` asserts
  ``lid < n_layer`` at start-up).

A structure the script does not recognise makes it exit 1: a new release needs a look.
``--check`` compares with the committed file and exits 1 on any difference.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

import release_scan
from release_scan import Scan, grouped, rows

OUT = Path(__file__).resolve().parents[1] / "pytest_eagle_contract/engines/llamacpp_rules.json"
FIRST = (0, 3, 28)  # the last release whose llama.cpp has no EAGLE-3


class Sdist:
    def __init__(self, path: Path) -> None:
        self.tar = tarfile.open(path)
        self.version = path.name.removeprefix("llama_cpp_python-").removesuffix(".tar.gz")
        self.root = f"llama_cpp_python-{self.version}/vendor/llama.cpp/"
        self.names = {m.name for m in self.tar.getmembers() if m.isfile()}

    def text(self, name: str) -> str | None:
        full = self.root + name
        if full not in self.names:
            return None
        member = self.tar.extractfile(full)
        return None if member is None else member.read().decode("utf-8", "replace")

    def need(self, name: str) -> str:
        text = self.text(name)
        if text is None:
            raise SystemExit(f"{self.version}: {name} not found")
        return text


def _one(pattern: str, text: str, what: str, version: str) -> re.Match[str]:
    found = list(re.finditer(pattern, text))
    if len(found) != 1:
        raise SystemExit(f"{version}: {what}: {len(found)} matches of {pattern!r}")
    return found[0]


def _key(sdist: Sdist) -> tuple[str, int]:
    """The GGUF key the EAGLE-3 loader reads and the id count it requires."""
    loader = sdist.need("src/models/eagle3.cpp")
    kv = _one(r"get_arr\((LLM_KV_\w+),\s*target_layer_ids", loader, "ids key", sdist.version)
    arch = sdist.need("src/llama-arch.cpp")
    spelled = _one(rf"\{{\s*{kv.group(1)},\s*\"([^\"]+)\"", arch, "key name", sdist.version)
    count = _one(r"target_layer_ids\.size\(\)\s*!=\s*(\d+)", loader, "id count", sdist.version)
    return spelled.group(1).replace("%s", "eagle3"), int(count.group(1))


def _converter(sdist: Sdist) -> dict[str, Any]:
    """Which draft config.json key the converter bakes in (None: it reads none and always
    bakes its default), and that default."""
    for name in ("conversion/llama.py", "convert_hf_to_gguf.py"):
        text = sdist.text(name) or ""
        if not re.search(r"add_target_layers\(|\.target_layers\", target_layers\)", text):
            continue
        default = _one(r"target_layers\s*=\s*(\[[^\]\n]+\])", text, "default", name)
        spelled = default.group(1).replace(" ", "").replace("target_num_layers", "L")
        if spelled != "[2,L//2,L-3]":
            raise SystemExit(f"{sdist.version}: converter default {default.group(1)} not known")
        keys = re.findall(r"aux_layer_ids\s*=\s*eagle3_raw_config\.get\(\"(\w+)\"\)", text)
        if len(keys) > 1:
            raise SystemExit(f"{sdist.version}: {len(keys)} id keys in the converter")
        if not keys and "aux_hidden_state_layer_ids" in text:
            raise SystemExit(f"{sdist.version}: the converter reads ids in an unknown way")
        return {
            "file": name,
            "key": keys[0] if keys else None,
            "default": "2,L//2,L-3",
            "nested": "eagle_config" in text,
        }
    raise SystemExit(f"{sdist.version}: no EAGLE-3 converter found")


def _target(sdist: Sdist) -> dict[str, str]:
    """What the target does with id L and with ids past it, and the concatenation order."""
    spec = sdist.need("common/speculative.cpp")
    start = spec.find("target_layer_ids_n != 3")
    section = spec[start : start + 9000] if start >= 0 else ""
    if "llama_set_embeddings_layer_inp" not in section:
        raise SystemExit(f"{sdist.version}: EAGLE-3 extraction not found in speculative.cpp")
    if not re.search(r"k\s*\*\s*\(size_t\)\s*n_embd_tgt", section):
        raise SystemExit(f"{sdist.version}: concatenation order not recognised")
    last = "nextn" if re.search(r"==\s*n_layer_tgt", section) else "layer_inp"
    return {"last": last, "order": "list"}


def _arch_classes(sdist: Sdist) -> dict[str, str]:
    """GGUF architecture name -> the llama_model_* class built for it."""
    names = dict(
        re.findall(r"\{\s*(LLM_ARCH_\w+),\s*\"([^\"]+)\"\s*\}", sdist.need("src/llama-arch.cpp"))
    )
    model = sdist.need("src/llama-model.cpp")
    out: dict[str, str] = {}
    for cases, cls in re.findall(
        r"((?:case\s+LLM_ARCH_\w+:\s*)+)return new (llama_model_\w+)\(", model
    ):
        for arch in re.findall(r"LLM_ARCH_\w+", cases):
            if arch in names:
                out[names[arch]] = cls
    if not out:
        raise SystemExit(f"{sdist.version}: no architecture -> class table in llama-model.cpp")
    return out


def _graphs(sdist: Sdist) -> dict[str, str]:
    """class -> the text of the file defining its graph."""
    out: dict[str, str] = {}
    for name in sorted(sdist.names):
        if name.startswith(sdist.root + "src/models/") and name.endswith(".cpp"):
            text = sdist.text(name.removeprefix(sdist.root)) or ""
            for cls in set(re.findall(r"(llama_model_\w+)::build_arch_graph", text)):
                out[cls] = text
    return out


def _records_input(text: str) -> bool:
    """Whether the graph records what enters layer il (the residual stream, or DeepSeek-V4's
    hyper-connection streams averaged) before it computes anything in the layer loop."""
    put = re.search(
        r"res->t_layer_inp\[il\]\s*=\s*(\w+|build_hc_mean\(inpL\)|dsv4_hc_mean\(ctx0, inpL\))\s*;",
        text,
    )
    loops = [
        m
        for m in re.finditer(r"for \(int il = 0; il < n_layer; \+\+il\) \{", text)
        if put is not None and m.end() <= put.start()
    ]
    if put is None or not loops:
        return False
    loop = loops[-1]
    before = text[loop.end() : put.start()]
    return not re.search(r"\b(ggml_\w+|build_(?!hc_mean)\w+)\(", before)


def _block(text: str, start: int) -> tuple[int, int]:
    """The span of the brace block opening at or after ``start``."""
    depth = 0
    begin = text.index("{", start)
    for n in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[n], 0)
        if depth == 0:
            return begin, n + 1
    raise SystemExit("unbalanced braces")


def _main_graph(text: str, cls: str, version: str) -> str:
    """The body of ``cls``'s own graph constructor (``cls::graph[<T>]::graph(``), the graph a
    target runs (its MTP graph, ``graph_mtp``, is the draft side's)."""
    found = re.search(rf"{cls}::graph(?:<\w+>)?::graph\(", text)
    if found is None:
        raise SystemExit(f"{version}: {cls}: no graph constructor found")
    begin, end = _block(text, found.end())
    return text[begin:end]


def _id_l(sdist: Sdist, text: str, cls: str, last: str) -> str:
    """What id L feeds on this graph (the module docstring's kinds)."""
    version = sdist.version
    if last == "layer_inp":
        context = sdist.need("src/llama-context.cpp")
        setter = context[context.find("::set_embeddings_layer_inp(") :][:600]
        if re.search(r"GGML_ASSERT\(lid < model\.hparams\.n_layer\(\)\)", setter):
            return "abort"
        if re.search(r"t_layer_inp\[n_layer\]\s*=", text):
            return "residual"
        return "abort"  # llm_graph_result::set_outputs: "layer input tensor is null"
    body = _main_graph(text, cls, version)
    put = list(re.finditer(r"res->t_h_nextn\s*=\s*(\w+)\s*;", body))
    if not put:
        return "zeros"
    if len(put) > 1:
        raise SystemExit(f"{version}: {cls}: {len(put)} t_h_nextn assignments in its graph")
    loop = re.search(r"for \(int il = 0; il < n_layer; \+\+il\) \{", body)
    if loop is None:
        raise SystemExit(f"{version}: {cls}: no layer loop in its graph")
    _, loop_end = _block(body, loop.start())
    if put[0].start() < loop_end:
        raise SystemExit(f"{version}: {cls}: t_h_nextn set inside the layer loop")
    after = body[loop_end : put[0].start()]
    if re.search(r"n_embd_out_impl\s*=", text):
        return "streams"
    if re.search(r"build_norm\([^;]*model\.output_norm", after):
        return "final_norm"
    if re.search(r"build_norm\(", after):
        raise SystemExit(f"{version}: {cls}: a norm other than the output norm before t_h_nextn")
    return "residual"


def _archs(sdist: Sdist, last: str) -> dict[str, dict[str, Any]]:
    """Per GGUF architecture whose graph records layer inputs: what id L feeds."""
    graphs = _graphs(sdist)
    out = {}
    for arch, cls in sorted(_arch_classes(sdist).items()):
        text = graphs.get(cls)
        if text is None or "t_layer_inp[il]" not in text:
            continue
        if not _records_input(text):
            raise SystemExit(f"{sdist.version}: {arch} records layer inputs in an unknown way")
        out[arch] = {"last": _id_l(sdist, text, cls, last)}
    return out


def hf_names(sdist: Sdist) -> dict[str, str]:
    """HF architecture -> GGUF architecture, from the converter's registrations
    (``@ModelBase.register("...")`` on a class setting ``model_arch = gguf.MODEL_ARCH.X``;
    a class inheriting its ``model_arch`` takes its base's)."""
    names = dict(
        re.findall(r"MODEL_ARCH\.(\w+):\s*\"([^\"]+)\"", sdist.need("gguf-py/gguf/constants.py"))
    )
    texts = [
        sdist.text(n.removeprefix(sdist.root)) or ""
        for n in sorted(sdist.names)
        if n.startswith(sdist.root + "conversion/") and n.endswith(".py")
    ] or [sdist.need("convert_hf_to_gguf.py")]
    own: dict[str, str] = {}
    bases: dict[str, str] = {}
    registered: dict[str, str] = {}
    block = re.compile(
        r"((?:(?:@ModelBase\.\w+\((?:[^()]|\([^()]*\))*\)|#[^\n]*)\s*)+)class (\w+)\((\w+)[^)]*\):"
    )
    for text in texts:
        for m in block.finditer(text):
            cls, base = m.group(2), m.group(3)
            bases[cls] = base
            body = text[m.end() : m.end() + 3000]
            arch = re.search(r"^    model_arch = gguf\.MODEL_ARCH\.(\w+)", body, re.M)
            if arch:
                own[cls] = arch.group(1)
            for reg in re.findall(r"@ModelBase\.register\(((?:[^()]|\([^()]*\))*)\)", m.group(1)):
                for hf in re.findall(r"\"(\w+)\"", reg):
                    registered[hf] = cls
    out = {}
    for hf, cls in registered.items():
        seen = cls
        for _ in range(8):
            if seen in own or seen not in bases:
                break
            seen = bases[seen]
        if seen in own and own[seen] in names:
            out[hf] = names[own[seen]]
    return out


def derive(path: Path) -> dict[str, Any] | None:
    """One release's rules, or None when its llama.cpp has no EAGLE-3."""
    sdist = Sdist(path)
    if sdist.text("src/models/eagle3.cpp") is None:
        return None
    key, count = _key(sdist)
    target = _target(sdist)
    return {
        "gguf_key": key,
        "count": count,
        "converter": _converter(sdist),
        "target": target,
        "archs": _archs(sdist, target["last"]),
        "hf": hf_names(sdist),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def tables(releases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    archs = grouped(releases, "archs")
    served = {a for r in releases.values() for a in r["archs"]}
    hf: dict[str, str] = {}
    for r in releases.values():  # the newest release's spelling wins; only served ones kept
        hf.update({k: v for k, v in r["hf"].items() if v in served})
    return {
        "releases": list(releases),
        "sha256": {v: r["sha256"] for v, r in releases.items()},
        "rows": rows(releases, {"archs", "hf", "sha256"}),
        "archs": archs,
        "hf": dict(sorted(hf.items())),
    }


SOURCE_ONLY = ("--no-binary", ":all:")  # the sdist, which vendors llama.cpp
SCAN = Scan(
    "llama-cpp-python", "llama_cpp_python-{version}.tar.gz", OUT, derive, tables, FIRST, SOURCE_ONLY
)


def main(argv: list[str] | None = None) -> int:
    return release_scan.main(SCAN, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
