"""Hostile contracts (issue 16): each ends in a located ContractError -- exit 2 from
``eagle-contract check``, a collection error in pytest -- never a traceback, a payload, a
hang or a memory blow-up. The child runs under a 3 GiB address-space limit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import conftest
import pytest
import torch
import yaml
from conftest import capped, fuzz_settings, hostile_values
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_eagle_contract.contract.model import (
    load_contract,
    parse_contract,
    schema,
    target_limits,
)
from pytest_eagle_contract.contract.safe_yaml import (
    DEFAULT_MAX_BYTES,
    MAX_BYTES_ENV,
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_NODES,
)
from pytest_eagle_contract.errors import ContractError
from pytest_eagle_contract.layers import Layer

MEMORY = 3 << 30
MARKER = "eagle-payload-ran"

VALID = """\
contract: demo
version: 1
target: {arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 64, vocab_size: 512}
training:
  format: specforge
  slots:
    - {layer: residual:2, norm: {median: 1.5, rtol: 0.2}}
    - {layer: residual:4, norm: {min: 3.0, max: 4.0}}
    - {layer: final_norm}
  fc_input: [0, 1]
  target_slot: 2
  sequence: {min_length: 1, max_length: 4096}
serving:
  engine: sglang
  version: 0.5.14
  aux_layer_ids: [1, 3]
"""
TARGET = "target: {arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 64, vocab_size: 512}"


_limit_memory = capped(MEMORY)


def run_cli(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``eagle-contract`` as users run it, memory-capped, with a hang guard."""
    return conftest.run_cli(*args, cwd=cwd, env=env, memory=MEMORY, timeout=120)


def refused(res: subprocess.CompletedProcess[str], *words: str) -> None:
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "MemoryError" not in out, out[-3000:]
    assert res.returncode == 2, out[-3000:]
    assert "eagle-contract: error:" in res.stderr, out[-3000:]
    for word in words:
        assert word in res.stderr, res.stderr[-3000:]


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


# name -> (contract bytes, words the error must carry)
CASES: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "python-name-tag": (
        VALID.replace("arch: LlamaForCausalLM", "arch: !!python/name:os.system ''").encode(),
        ("!!python/name:os.system is not allowed", ":3:"),
    ),
    "python-apply-payload": (
        (VALID + f"description: !!python/object/apply:os.system ['touch {MARKER}']\n").encode(),
        ("is not allowed",),
    ),
    "python-new-on-mapping": (
        (
            VALID + f"description: !!python/object/new:os.system {{args: ['touch {MARKER}']}}\n"
        ).encode(),
        ("not allowed",),
    ),
    "local-tag": (
        VALID.replace("engine: sglang", "engine: !shell sglang").encode(),
        ("!shell is not allowed",),
    ),
    "binary-tag": ((VALID + "description: !!binary aGVsbG8=\n").encode(), ("!!binary",)),
    "merge-key": (
        VALID.replace(
            TARGET, "base: &t {num_hidden_layers: 8, hidden_size: 64}\ntarget: {<<: *t}"
        ).encode(),
        ("merge keys (<<)",),
    ),
    "control-character": ((VALID + "description: a\x07b\n").encode(), ("U+0007", ":17:15:")),
    "nul-escape": ((VALID + 'description: "a\\0b"\n').encode(), ("U+0000",)),
    "surrogate-escape": ((VALID + 'description: "\\ud800"\n').encode(), ("surrogate",)),
    "utf16-bom": (VALID.encode("utf-16"), ("UTF-16",)),
    "utf16-no-bom": (VALID.encode("utf-16-le"), ("U+0000", "UTF-16")),
    "invalid-utf8": (VALID.encode().replace(b"demo", b"d\xffmo"), ("0xFF is not UTF-8", ":1:")),
    "deep-nesting": (
        (VALID + "description: " + "[" * 20000 + "]" * 20000 + "\n").encode(),
        (f"deeper than {MAX_DEPTH}",),
    ),
    "deep-block-nesting": (
        (VALID + "".join(" " * i + f"k{i}:\n" for i in range(200))).encode(),
        (f"deeper than {MAX_DEPTH}",),
    ),
    "recursive-alias": ((VALID + "description: &r [*r]\n").encode(), ("contains it",)),
    "alias-bomb": (_bomb().encode(), (f"more than {MAX_NODES} values",)),
    "huge-integer": (
        VALID.replace("hidden_size: 64", "hidden_size: " + "9" * 100_000).encode(),
        ("not a valid int",),
    ),
    "huge-hex-integer": (
        VALID.replace("hidden_size: 64", "hidden_size: 0x" + "f" * 5000).encode(),
        ("out of range",),
    ),
    "float-hidden-size": (
        VALID.replace("hidden_size: 64", "hidden_size: 16.0").encode(),
        ("16.0 is not of type 'integer'",),
    ),
    "float-fc-input": (
        VALID.replace("fc_input: [0, 1]", "fc_input: [0.0, 1]").encode(),
        ("training.fc_input[0]",),
    ),
    "bool-layers": (
        VALID.replace("num_hidden_layers: 8", "num_hidden_layers: true").encode(),
        ("True is not of type 'integer'",),
    ),
    "hidden-size-2**40": (
        VALID.replace("hidden_size: 64", f"hidden_size: {2**40}").encode(),
        ("maximum of 65536", "plausibility"),
    ),
    "layers-1e9": (
        VALID.replace("num_hidden_layers: 8", "num_hidden_layers: 1000000000").encode(),
        ("maximum of 1024",),
    ),
    "vocab-2**40": (
        VALID.replace("vocab_size: 512", f"vocab_size: {2**40}").encode(),
        ("maximum of 4194304",),
    ),
    "sequence-2**40": (
        VALID.replace("max_length: 4096", f"max_length: {2**40}").encode(),
        ("maximum of 16777216",),
    ),
    "layer-index-5000-digits": (
        VALID.replace("residual:4", "residual:" + "9" * 5000).encode(),
        ("beyond the target's 8 layers",),
    ),
    "nan-norm": (VALID.replace("median: 1.5", "median: .nan").encode(), ("NaN",)),
    "two-documents": ((VALID + "---\n" + VALID).encode(), ("another document",)),
    "non-string-key": ((VALID + "? [a, b]\n: 1\n").encode(), ("keys must be strings",)),
    "huge-list": (
        (VALID + "description: [" + ", ".join(["1"] * 2000) + "]\n").encode(),
        (f"more than {MAX_ITEMS} items",),
    ),
    "many-distinct-items": (
        VALID.replace(
            "fc_input: [0, 1]",
            "fc_input: [" + ", ".join(f"{{k: {i}}}" for i in range(MAX_ITEMS)) + "]",
        ).encode(),
        ("fc_input",),
    ),
    "many-problems": (
        (
            "contract: x\nversion: 1\n"
            + TARGET
            + "\n"
            + "".join(f"bogus{i}: 1\n" for i in range(200))
        ).encode(),
        ("and 150 more problems",),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_hostile_contract_is_a_located_usage_error(tmp_path: Path, name: str) -> None:
    data, words = CASES[name]
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    res = run_cli("check", path, cwd=tmp_path)
    refused(res, str(path), *words)
    assert not (tmp_path / MARKER).exists()
    assert path.read_bytes() == data  # inputs unchanged
    assert len(res.stderr) < 50_000  # messages are cut, problems capped


def test_oversized_and_special_files_are_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB that must never be read
    refused(run_cli("check", big, cwd=tmp_path), "larger than 1048576 bytes", MAX_BYTES_ENV)
    refused(run_cli("check", "/dev/zero", cwd=tmp_path), "not a regular file")  # not read at all
    refused(run_cli("check", tmp_path, cwd=tmp_path), "cannot read contract")
    refused(
        run_cli("check", big, cwd=tmp_path, env={MAX_BYTES_ENV: "lots"}), f"{MAX_BYTES_ENV}='lots'"
    )


def test_the_size_cap_can_be_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(VALID.replace("training:", "# " + "x" * (1 << 20) + "\ntraining:"))
    with pytest.raises(ContractError, match="larger than 1048576 bytes"):
        load_contract(path)
    monkeypatch.setenv(MAX_BYTES_ENV, str(2 << 20))
    assert load_contract(path).name == "demo"


def test_utf8_bom_and_dates_are_read(tmp_path: Path) -> None:
    text = "\ufeff" + VALID.replace("version: 0.5.14", "version: 2024-01-01")
    contract = parse_contract(text, tmp_path / "c.yaml")
    assert contract.serving is not None and contract.serving.version == "2024-01-01"


@pytest.mark.slow
def test_plugin_reports_a_hostile_contract_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(CASES["alias-bomb"][0])
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--eagle-contract", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=_limit_memory,
        timeout=120,
    )
    out = res.stdout + res.stderr
    assert res.returncode in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED), out
    assert "invalid contract" in out and f"more than {MAX_NODES} values" in out, out
    assert "Traceback" not in out, out


# -- fuzz -------------------------------------------------------------------------------

FUZZ = fuzz_settings(60)
_PIECES = [
    "&a ",
    "*a",
    "!!python/name:os.system ",
    "<<: ",
    "!!binary ",
    "? ",
    "- ",
    ": ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "#",
    "|",
    ">",
    "'",
    '"',
    "\\",
    "\t",
    "\n",
    "\n  ",
    "%",
    "@",
    "`",
    "---\n",
    "...",
    ".nan",
    ".inf",
    "1e999",
    "0x",
    "16.0",
    "true",
    "null",
    "~",
    "residual:",
    "\x00",
    "\x07",
    "\x85",
    "\ufeff",
    "\u2028",
    "é",
    "\U0001f600",
    "9" * 30,
    "-1",
    "2024-01-01",
]


def _ok_or_contract_error(text: str) -> None:
    try:
        parse_contract(text, "fuzz.yaml")
    except ContractError as exc:
        assert exc.problems and all(p.line >= 1 and p.column >= 1 for p in exc.problems)


@FUZZ
@given(st.data())
def test_fuzz_text_mutations(data: st.DataObject) -> None:
    """Splices of YAML syntax, tags, aliases and odd characters into a valid contract."""
    text = VALID
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 12))
        piece = data.draw(st.sampled_from(_PIECES) | st.text(max_size=8))
        text = text[:at] + piece * data.draw(st.integers(1, 3)) + text[at + cut :]
    _ok_or_contract_error(text)


_VALUES = hostile_values(
    ["embed", "final_norm", "residual:3", "specforge", "sglang", "EC201", "bfloat16", "int64"],
    key_size=10,
    leaves=12,
)


def _paths(node: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


@FUZZ
@given(st.data())
def test_fuzz_structure_mutations(data: st.DataObject) -> None:
    """A valid contract with subtrees replaced or keys added, dumped back to YAML."""
    tree = yaml.safe_load(VALID)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(tree)))
        value = data.draw(_VALUES)
        if not path:
            tree = value
            continue
        parent: object = tree
        for part in path[:-1]:
            parent = parent[part]  # type: ignore[index]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(sorted(_schema_keys())))] = value
        else:
            parent[path[-1]] = value  # type: ignore[index]
    _ok_or_contract_error(yaml.safe_dump(tree, allow_unicode=data.draw(st.booleans())))


def _schema_keys(node: dict[str, object] | None = None) -> set[str]:
    node = schema() if node is None else node
    out: set[str] = set()
    for key, sub in node.get("properties", {}).items():  # type: ignore[union-attr]
        out.add(key)
        out |= _schema_keys(sub)
        if isinstance(sub, dict) and "items" in sub:
            out |= _schema_keys(sub["items"])
    return out


# -- the schema and the Python agree ------------------------------------------------------

REAL_TARGETS = {  # (num_hidden_layers, hidden_size, vocab_size) of large released models
    "DeepSeek-V3": (61, 7168, 129280),
    "Kimi-K2": (61, 7168, 163840),
    "Llama-3.1-405B": (126, 16384, 128256),
    "Qwen3-235B-A22B": (94, 4096, 151936),
    "Gemma-3-27B": (62, 5376, 262208),
}


@pytest.mark.parametrize("name", REAL_TARGETS)
def test_plausibility_bounds_admit_real_models(tmp_path: Path, name: str) -> None:
    layers, hidden, vocab = REAL_TARGETS[name]
    text = VALID.replace(
        TARGET,
        f"target: {{num_hidden_layers: {layers}, hidden_size: {hidden}, vocab_size: {vocab}}}",
    )
    assert parse_contract(text, tmp_path / "c.yaml").target.hidden_size == hidden
    limits = target_limits()
    assert limits["num_hidden_layers"] >= 8 * layers and limits["hidden_size"] >= 4 * hidden
    assert limits["vocab_size"] >= 8 * vocab


def test_parse_contract_has_the_loader_guarantees(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="larger than"):
        parse_contract("#" * (DEFAULT_MAX_BYTES + 1), tmp_path / "c.yaml")
    with pytest.raises(ContractError, match=r"U\+0000"):
        parse_contract(VALID + "description: \x00\n", tmp_path / "c.yaml")


def _enum(*path: str) -> list[str]:
    node: dict[str, object] = schema()
    for part in path:
        node = node[part]  # type: ignore[assignment]
    return node["enum"]  # type: ignore[return-value]


def test_schema_enums_match_the_python_constants() -> None:
    from pytest_eagle_contract.engines.resolve import ENGINES
    from pytest_eagle_contract.methods import METHOD_ONLY_ENGINES
    from pytest_eagle_contract.shards.formats import FORMAT_NAMES

    training = ("properties", "training", "properties")
    assert set(_enum(*training, "format")) == set(FORMAT_NAMES)
    # a contract's engine: an EAGLE-3 engine, or a method-only one (onnxruntime-genai)
    engines = set(_enum("properties", "serving", "properties", "engine"))
    assert engines <= set(ENGINES) | set(METHOD_ONLY_ENGINES)
    for name in _enum("$defs", "float_dtype"):
        assert getattr(torch, name).is_floating_point
    for name in _enum("$defs", "int_dtype"):
        assert not getattr(torch, name).is_floating_point


def _layer_pattern() -> re.Pattern[str]:
    slot = schema()["properties"]["training"]["properties"]["slots"]["items"]
    return re.compile(slot["properties"]["layer"]["pattern"])


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(
    st.from_regex(r"\s?(embed|final_norm|residual:[0-9٣]{1,3}|[a-z_:0-9]{0,12})\s?", fullmatch=True)
    | st.text(max_size=16)
)
def test_layer_pattern_admits_only_what_layers_parse(text: str) -> None:
    """Schema-valid layer names always parse; the parser's extra leniency (spaces around,
    non-ASCII digits) never reaches a contract."""
    if _layer_pattern().search(text):
        assert str(Layer.parse(text)) in ("embed", "final_norm") or str(
            Layer.parse(text)
        ).startswith("residual:")
    else:
        try:
            Layer.parse(text)
        except ValueError:
            return
        assert text != text.strip() or not text.strip().removeprefix("residual:").isascii()


def test_every_canonical_layer_and_rule_code_fits_the_schema() -> None:
    from pytest_eagle_contract.findings import RULES

    limit = target_limits()["num_hidden_layers"]
    assert all(_layer_pattern().search(str(Layer(k))) for k in range(-1, limit + 1))
    waive = schema()["properties"]["waive"]["items"]["properties"]["code"]["pattern"]
    assert all(re.search(waive, code) for code in RULES)


def test_the_forbidden_characters_are_exactly_those_pyyaml_refuses() -> None:
    """The contract reader's up-front refusal (spelled as the forbidden ranges, which
    compile fast) covers exactly the code points PyYAML's own reader refuses, all of them."""
    from yaml.reader import Reader

    from pytest_eagle_contract.contract.safe_yaml import _NON_PRINTABLE

    everything = "".join(map(chr, range(0x110000)))
    ours = {m.start() for m in _NON_PRINTABLE.finditer(everything)}
    theirs = {m.start() for m in Reader.NON_PRINTABLE.finditer(everything)}
    assert ours == theirs
    assert {0, 0x7F, 0xD800, 0xFFFF} <= ours and not {0x9, 0xA, 0xD, 0x85} & ours
