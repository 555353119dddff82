"""llama.cpp by llama-cpp-python release, through ``eagle-contract resolve --engine llama.cpp``:
the ids a GGUF draft carries (``eagle3.target_layers``) or the converter bakes from a
config.json, what the target records for them, and what it refuses; GGUF drafts written here
byte by byte (the format: magic, version, counts, typed key/value pairs), hostile ones
included (``HOSTILE_GGUF``, also swept by benchmarks/hostile_sweep.py's gguf surface); a
pinned snapshot of the rules derived from the releases' code
(``engines/llamacpp_rules.json``, checked against the sdists by test_llamacpp_releases.py)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from serving_cases import layer_inputs, resolve_json

from pytest_eagle_contract.engines import llamacpp
from pytest_eagle_contract.engines.matrix import serving_engines

TOP = "eagle_aux_hidden_state_layer_ids"
_INT32, _UINT32, _STRING, _ARRAY = 5, 4, 8, 9


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf(path: Path, pairs: list[tuple[str, int, object]], version: int = 3) -> Path:
    """A GGUF file with these (key, type, value) pairs and no tensors."""
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs))
    for key, kind, value in pairs:
        out += _s(key) + struct.pack("<I", kind)
        if kind == _STRING:
            out += _s(str(value))
        elif kind == _ARRAY:
            inner, items = value  # type: ignore[misc]
            out += struct.pack("<IQ", inner, len(items))
            for item in items:
                out += _s(item) if inner == _STRING else struct.pack("<i", item)
        else:
            out += struct.pack("<i" if kind == _INT32 else "<I", value)
    path.write_bytes(out)
    return path


def _draft(tmp_path: Path, ids: list[int] | None = None, **extra: object) -> Path:
    pairs: list[tuple[str, int, object]] = [("general.architecture", _STRING, "eagle3")]
    if ids is not None:
        pairs.append(("eagle3.target_layers", _ARRAY, (_INT32, ids)))
    pairs.append(("eagle3.target_hidden_size", _UINT32, 4096))
    pairs.append(("tokenizer.ggml.tokens", _ARRAY, (_STRING, ["<s>", "a", "b"])))
    return gguf(tmp_path / "draft.gguf", pairs)


def _resolve(cli, *args: object, version: str = "0.3.36", layers: int = 32):
    head = ("--engine", "llama.cpp", "--version", version, "--num-layers", layers)
    return resolve_json(cli, *head, *args)


def test_ids_are_layer_inputs_in_list_order_and_id_0_is_the_embedding(cli):
    res, out = _resolve(cli, "--arch", "llama", "--ids", "29", "0", "16")
    assert res.returncode == 0 and out["layers"] == layer_inputs(29, 0, 16)
    assert any("does not sort" in n for n in out["notes"])
    assert "common/speculative.cpp" in out["source"] and "0.3.35" in out["source"]
    res, out = _resolve(cli, "--arch", "LlamaForCausalLM", "--ids", "4", "4", "9")
    assert res.returncode == 0 and out["layers"] == layer_inputs(4, 4, 9)  # duplicates kept


@pytest.mark.parametrize(
    ("arch", "version", "last", "says"),
    [
        # from 0.3.35 id L is the graph's t_h_nextn: before the output norm on gpt-oss ...
        ("gpt-oss", "0.3.36", "residual:32", None),
        # ... after it on gemma4, qwen3.5, qwen3-next, nemotron-h (their MTP heads want it so)
        ("gemma4", "0.3.36", "final_norm", None),
        ("qwen35", "0.3.35", "final_norm", None),
        # up to 0.3.34 id L asks for layer L's input: llama_context asserts lid < n_layer
        ("gemma4", "0.3.34", None, "GGML_ASSERT aborts at start-up"),
        ("llama", "0.3.34", None, "GGML_ASSERT aborts at start-up"),
    ],
)
def test_what_id_l_feeds_depends_on_the_graph(cli, arch, version, last, says):
    res, out = _resolve(cli, "--arch", arch, "--ids", "2", "16", "32", version=version)
    if last:
        assert res.returncode == 0 and out["layers"] == ["residual:2", "residual:16", last]
        assert last != "final_norm" or any("feeds final_norm" in n for n in out["notes"])
    else:
        assert res.returncode == 2 and says in out["refused"] and out["silent"] is False


@pytest.mark.parametrize(
    ("arch", "says"),
    [
        # the llama graph never sets t_h_nextn: the nextn buffer stays as allocated (zeros)
        ("llama", "silently receives zeros in that slot (no abort)"),
        ("LlamaForCausalLM", "silently receives zeros in that slot (no abort)"),
        ("qwen3", "silently receives zeros"),
        # DeepSeek-V4's t_h_nextn is its hyper-connection streams, n_embd_out = 4 x n_embd
        ("deepseek4", "silently receives other tokens' streams (no abort)"),
    ],
)
def test_id_l_runs_with_a_silent_wrong_input_where_the_graph_never_fills_it(cli, arch, says):
    """Seen on a real build of the 0.3.36 sdist (the llama target runs, the draft reads zeros):
    not an abort, and the answer says which."""
    res, out = _resolve(cli, "--arch", arch, "--ids", "2", "16", "32")
    assert res.returncode == 2 and out["layers"] is None
    assert says in out["refused"] and out["silent"] is True
    assert "common/speculative.cpp aborts" not in out["refused"]
    text = cli("resolve", "--engine", "llama.cpp", "--version", "0.3.36", "--arch", arch,
               "--num-layers", "32", "--ids", "2", "16", "32")  # fmt: skip
    assert "runs this with a wrong draft input, silently (no abort)" in text.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--ids", "2", "16"), "requires exactly 3 ids"),
        (("--ids", "2", "16", "20", "29"), "requires exactly 3 ids"),
        (("--ids", "-1", "16", "29"), "any other aborts at start-up"),
        (("--ids", "2", "16", "33"), "any other aborts at start-up"),
        (("--arch", "deepseek2", "--ids", "2", "16", "29"), "does not record layer inputs"),
        (("--arch", "qwen3next", "--ids", "2", "16", "29"), "served in"),
    ],
)
def test_what_llama_cpp_refuses(cli, args, says):
    version = "0.3.32" if "qwen3next" in args else "0.3.36"
    res, out = _resolve(cli, *args, version=version)
    assert res.returncode == 2 and says in out["refused"], out


def test_a_gguf_draft_is_resolved_by_its_baked_ids(cli, tmp_path):
    path = _draft(tmp_path, [1, 16, 29])
    res, out = _resolve(cli, "--arch", "qwen3", "--draft-config", path)
    assert res.returncode == 0 and out["layers"] == layer_inputs(1, 16, 29)
    assert any("baked in the GGUF" in n for n in out["notes"])
    res, out = _resolve(cli, "--arch", "qwen3", "--draft-config", _draft(tmp_path, None))
    assert res.returncode == 2 and "has no eagle3.target_layers" in out["refused"]


def _config(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], **config}))
    return path


@pytest.mark.parametrize(
    ("version", "config", "layers", "codes"),
    [
        # from 0.3.35 the converter bakes a top-level key
        ("0.3.36", {TOP: [1, 16, 29]}, (1, 16, 29), []),
        # it never reads the nested one SGLang and SpecForge write: the default, silently
        ("0.3.36", {"eagle_config": {TOP: [1, 16, 29]}}, (2, 16, 29), ["EC508"]),
        # up to 0.3.34 it reads no ids at all and always bakes [2, L//2, L-3]
        ("0.3.34", {TOP: [1, 16, 29]}, (2, 16, 29), ["EC508"]),
        ("0.3.36", {}, (2, 16, 29), []),
    ],
)
def test_a_config_json_draft_gets_what_the_converter_bakes(
    cli, tmp_path, version, config, layers, codes
):
    path = _config(tmp_path, config)
    res, out = _resolve(cli, "--arch", "llama", "--draft-config", path, version=version)
    assert out["layers"] == layer_inputs(*layers)
    assert [p["code"] for p in out["problems"]] == codes
    assert res.returncode == (1 if codes else 0)


def test_want_gives_ids_in_the_trainers_order_since_llama_cpp_does_not_sort(cli):
    res = cli(
        "resolve", "--engine", "llama.cpp", "--version", ">=0.3.35", "--arch", "qwen3",
        "--num-layers", "32", "--want", "residual:29", "embed", "residual:16", "--json",
    )  # fmt: skip
    out = json.loads(res.stdout)
    assert res.returncode == 0 and out["ids"] == [29, 0, 16], out
    assert out["config_line"] == f'"{TOP}": [29, 0, 16]'


def _raw(*parts: bytes) -> Callable[[Path], object]:
    """A file of the magic then these bytes (what ``gguf`` would never write)."""
    return lambda p: p.write_bytes(b"GGUF" + b"".join(parts))


_ONE_PAIR = struct.pack("<IQQ", 3, 0, 1)  # version 3, no tensors, one key/value pair

HOSTILE_GGUF: dict[str, tuple[Callable[[Path], object], str]] = {
    "magic": (_raw(), "ends early"),
    "version": (lambda p: gguf(p, [], version=1), "GGUF version 1"),
    "huge-string": (_raw(struct.pack("<IQQQ", 3, 0, 1, 1 << 40)), "over the limit"),
    "huge-count": (_raw(struct.pack("<IQQ", 3, 0, 1 << 40)), "over the limit"),
    "truncated-array": (
        _raw(
            _ONE_PAIR,
            _s("eagle3.target_layers"),
            struct.pack("<IIQ", _ARRAY, _INT32, 3),
            struct.pack("<i", 1),
        ),
        "ends early",
    ),
    "bad-type": (_raw(_ONE_PAIR, _s("x"), struct.pack("<I", 77)), "value type 77"),
    "nested-array": (
        _raw(_ONE_PAIR, _s("x"), struct.pack("<IIQ", _ARRAY, _ARRAY, 1)),
        "an array of value type 9",
    ),
    "not-utf8": (_raw(_ONE_PAIR, struct.pack("<Q", 2), b"\xff\xfe"), "not UTF-8"),
    "ids-not-ints": (
        lambda p: gguf(p, [("eagle3.target_layers", _STRING, "1,2,3")]),
        "not a list of integers",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_GGUF))
def test_a_hostile_gguf_draft_is_a_usage_error_naming_the_file(cli, tmp_path, name):
    build, says = HOSTILE_GGUF[name]
    path = tmp_path / f"{name}.gguf"
    build(path)
    res = cli("resolve", "--engine", "llama.cpp", "--num-layers", "32", "--draft-config", path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert str(path) in res.stderr and says in res.stderr, res.stderr


def test_other_engines_given_a_gguf_draft_read_no_ids_from_it(cli, tmp_path):
    path = _draft(tmp_path, [1, 16, 29])
    res = cli("resolve", "--engine", "vllm", "--num-layers", "32", "--draft-config", path)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_matrix_lists_llama_cpp_per_release_span():
    from pytest_eagle_contract.engines.matrix import matrix
    from pytest_eagle_contract.layers import Layer

    assert "llama.cpp" in [e.name for e in serving_engines()]
    trained = [Layer(1), Layer(16), Layer(29)]
    rows = [
        r
        for r in matrix(trained, 32, "llama", lambda e: (1, 16, 29), None)
        if r.engine.name == "llama.cpp"
    ]
    assert [r.label for r in rows] == ["0.3.29..0.3.36"] and rows[0].same


def test_pinned_snapshot_of_the_rules_from_the_releases():
    assert llamacpp.releases() == [f"0.3.{n}" for n in range(29, 37)]
    old, new = llamacpp.rules("0.3.34"), llamacpp.rules("0.3.35")
    assert (old.gguf_key, old.count, old.converter["key"], old.last) == (
        "eagle3.target_layers", 3, None, "layer_inp"
    )  # fmt: skip
    assert (new.converter["key"], new.last) == (TOP, "nextn")
    data = llamacpp._data()
    assert data["hf"]["Qwen3ForCausalLM"] == "qwen3" and "deepseek2" not in {
        a for r in data["archs"] for a in r["archs"]
    }
    last = {
        (a, v): r["last"]
        for r in data["archs"]
        for a in r["archs"]
        for v in ("0.3.34", "0.3.36")
        if llamacpp._covers(r, v)
    }
    assert {last[a, "0.3.34"] for a in ("llama", "gemma4", "qwen35")} == {"abort"}
    assert [last[a, "0.3.36"] for a in ("llama", "gpt-oss", "gemma4", "deepseek4")] == [
        "zeros", "residual", "final_norm", "streams"
    ]  # fmt: skip
