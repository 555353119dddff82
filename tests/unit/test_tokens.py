"""Issue 25: the tokens the draft was trained on are the tokens it will be served.

Real tokenizer folders (a BPE trained here, tests/tokenizer_data.py), shards written by a
pipeline function that does what SpecForge's does (render the conversation with the chat
template, tokenize, mask the assistant spans), each failure class made by changing one
step of that pipeline, and the matching pipeline passing.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from tokenizer_data import (
    LLAMA3,
    QWEN3,
    QWEN3_EMPTY_THINK_TEMPLATE,
    TEXT,
    make_tokenizer,
)

from pytest_eagle_contract.authoring.tokenizer import draft_section, drafted_lines, tokenizer_lines
from pytest_eagle_contract.checks.token_parity import check_parity
from pytest_eagle_contract.checks.tokens import check_tokenizer, check_tokens
from pytest_eagle_contract.contract.model import parse_contract
from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.models.chat_template import render
from pytest_eagle_contract.models.conversations import read_rows, row_index
from pytest_eagle_contract.models.tokenizer import read_tokenizer
from pytest_eagle_contract.shards.shard import Shard
from pytest_eagle_contract.shards.writing import write_shard

H = 8
CONVERSATIONS = [
    [
        {"role": "user", "content": "Hello there, how are you today?"},
        {"role": "assistant", "content": "I am fine, thank you."},
    ],
    [
        {"role": "system", "content": "okay sure"},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris is the capital of France."},
        {"role": "user", "content": "The quick brown fox"},
        {"role": "assistant", "content": "jumps over the lazy dog."},
    ],
    [
        {"role": "user", "content": "Let me think about this step by step."},
        {"role": "assistant", "content": "First, add the numbers."},
    ],
]
REASONED = [
    [
        {"role": "user", "content": "What is the capital of France?"},
        {
            "role": "assistant",
            "content": "Paris.",
            "reasoning_content": "Let me think about this step by step.",
        },
    ]
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("llama") / "tok", LLAMA3)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("qwen") / "tok", QWEN3)


def pipeline(
    folder: Path,
    messages: list[dict],
    *,
    bos_again: bool = False,
    mask_header: bool = False,
    mask_all: bool = False,
    kwargs: dict | None = None,
) -> tuple[list[int], list[int]]:
    """What a data pipeline makes of one conversation: the template rendered and
    tokenized without special tokens (``bos_again``: with them, as a bug would), the loss
    mask on each assistant turn's content and end token (``mask_header``: from the header
    on; ``mask_all``: everything)."""
    tok = read_tokenizer(folder)
    text = render(tok.chat_template, messages, special=tok.special, kwargs=kwargs)
    ids = tok.encode(text)
    if bos_again:
        ids = [tok.special_ids["bos"], *ids]
    header = draft_section(folder)["assistant_header"]
    eos = tok.special_ids["eos"]
    mask = [1 if mask_all else 0] * len(ids)
    h = len(header)
    for p in range(len(ids)):
        if ids[p : p + h] == header:
            start = p if mask_header else p + h
            end = ids.index(eos, p + h) + 1
            mask[start:end] = [1] * (end - start)
    return ids, mask


def write(root: Path, index: int, ids: list[int], mask: list[int]) -> Path:
    g = torch.Generator().manual_seed(index)
    t = len(ids)
    slots = [torch.randn(t, H, generator=g).to(torch.bfloat16) for _ in range(4)]
    return write_shard(
        root, "specforge", index, torch.tensor(ids), torch.tensor(mask, dtype=torch.long), slots
    )


def contract_text(folder: Path, shards: Path, extra: str = "", **section) -> str:
    values = {**draft_section(folder), **section}
    lines = [f"  {k}: {json.dumps(v)}" for k, v in values.items() if v is not None]
    return (
        f"""contract: tokens
version: 1
target: {{num_hidden_layers: 8, hidden_size: {H}, vocab_size: 512}}
training:
  format: specforge
  shards: {shards}
  slots:
    - {{layer: residual:2}}
    - {{layer: residual:4}}
    - {{layer: residual:5}}
    - {{layer: final_norm}}
tokenizer:
  path: {folder}
"""
        + "\n".join(lines)
        + "\n"
        + extra
    )


def contract_of(tmp_path: Path, folder: Path, **section):
    return parse_contract(
        contract_text(folder, tmp_path / "shards", **section), tmp_path / "c.yaml"
    )


def shard_findings(tmp_path: Path, folder: Path, ids, mask, serving: Path | None = None, **section):
    contract = contract_of(tmp_path, folder, **section)
    path = write(tmp_path / "shards", 0, ids, mask)
    shard = Shard.load(path, path.name, "specforge", H)
    tok = read_tokenizer(serving) if serving is not None else None
    return check_tokens(contract, shard, tok)


def codes(found) -> list[str]:
    return sorted({f.code for f in found})


# -- the tokenizer folder against the contract ------------------------------------------


def test_our_render_is_transformers_apply_chat_template(llama, qwen):
    from transformers import PreTrainedTokenizerFast

    for folder in (llama, qwen):
        hf = PreTrainedTokenizerFast.from_pretrained(str(folder))
        for messages in [*CONVERSATIONS, *REASONED]:
            ids, _ = pipeline(folder, messages)
            want = hf.apply_chat_template(messages, tokenize=True, return_dict=True)
            assert ids == list(want["input_ids"])


def test_the_tokenizer_the_data_was_made_with_passes(tmp_path, llama):
    assert check_tokenizer(llama, contract=contract_of(tmp_path, llama)) == []
    assert check_tokenizer(llama, contract=None) == []


def test_another_revision_template_and_ids_are_named(tmp_path, llama):
    other = make_tokenizer(tmp_path / "other", LLAMA3, text=[t.upper() for t in TEXT])
    found = check_tokenizer(other, contract=contract_of(tmp_path, llama))
    assert "EC331" in codes(found) and "EC332" not in codes(found)
    template = make_tokenizer(tmp_path / "tpl", LLAMA3, template="{{ bos_token }}x")
    assert "EC332" in codes(check_tokenizer(template, contract=contract_of(tmp_path, llama)))
    bigger = make_tokenizer(tmp_path / "big", LLAMA3, vocab_size=320)
    found = check_tokenizer(bigger, contract=contract_of(tmp_path, llama))
    assert [f.found for f in found if f.code == "EC333"] == ["320"]


def test_a_policy_the_serving_template_does_not_make_is_ec334(tmp_path, llama):
    found = check_tokenizer(llama, contract=contract_of(tmp_path, llama, bos="none"))
    assert codes(found) == ["EC334"] and found[0].found == "1 BOS"


@pytest.mark.parametrize("case", ["missing", "remote-code", "too-big", "not-json"])
def test_an_unreadable_folder_is_ec330(tmp_path, llama, monkeypatch, case):
    folder = tmp_path / "bad"
    folder.mkdir()
    if case == "remote-code":
        (folder / "tokenizer_config.json").write_text('{"auto_map": {"AutoTokenizer": "x.Y"}}')
    elif case == "too-big":
        (folder / "tokenizer.json").write_bytes((llama / "tokenizer.json").read_bytes())
        monkeypatch.setenv("EAGLE_TARGET_JSON_MAX_BYTES", "1000")
    elif case == "not-json":
        (folder / "tokenizer.json").write_text("{nope")
    found = check_tokenizer(folder, contract=None)
    assert codes(found) == ["EC330"], found
    if case == "remote-code":
        assert "remote code" in found[0].message


def test_thinking_without_think_tokens_in_the_serving_tokenizer_is_ec337(tmp_path, llama, qwen):
    contract = contract_of(tmp_path, qwen, thinking="on")
    assert check_tokenizer(qwen, contract=contract) == []
    found = check_tokenizer(llama, contract=contract)
    assert "EC337" in codes(found)


# -- the shards' tokens (no model) -------------------------------------------------------


def test_a_pipeline_that_follows_the_template_passes(tmp_path, llama):
    ids, mask = pipeline(llama, CONVERSATIONS[1])
    assert shard_findings(tmp_path, llama, ids, mask, serving=llama) == []


def test_a_doubled_bos_is_ec334(tmp_path, llama):
    ids, mask = pipeline(llama, CONVERSATIONS[0], bos_again=True)
    found = shard_findings(tmp_path, llama, ids, mask)
    assert codes(found) == ["EC334"] and "doubled" in found[0].message
    assert "add_special_tokens=False" in found[0].hint


def test_a_loss_mask_on_the_header_is_ec336(tmp_path, llama):
    ids, mask = pipeline(llama, CONVERSATIONS[1], mask_header=True)
    assert codes(shard_findings(tmp_path, llama, ids, mask)) == ["EC336"]


def test_a_loss_mask_on_the_user_turn_is_ec335(tmp_path, llama):
    ids, mask = pipeline(llama, CONVERSATIONS[0])
    mask = [1 if i < 6 else m for i, m in enumerate(mask)]  # the user's header and text
    assert "EC335" in codes(shard_findings(tmp_path, llama, ids, mask))


def test_thinking_census_against_the_mode(tmp_path, qwen):
    reasoned, mask = pipeline(qwen, REASONED[0])
    assert shard_findings(tmp_path, qwen, reasoned, mask, serving=qwen, thinking="on") == []
    found = shard_findings(tmp_path, qwen, reasoned, mask, thinking="off")
    assert codes(found) == ["EC337"] and found[0].extra["census"]["filled"] == 1
    # SpecForge#296: re-templating non-thinking data injects empty think blocks
    folder = make_tokenizer(tmp_path / "retemplated", QWEN3, template=QWEN3_EMPTY_THINK_TEMPLATE)
    empty, mask = pipeline(folder, CONVERSATIONS[0])
    found = shard_findings(tmp_path, qwen, empty, mask, serving=qwen, thinking="on")
    assert codes(found) == ["EC337"] and found[0].extra["census"]["empty"] == 1
    assert shard_findings(tmp_path, qwen, empty, mask, serving=qwen, thinking="off") == []


def test_a_token_the_serving_tokenizer_lacks_is_ec338(tmp_path, llama):
    small = make_tokenizer(tmp_path / "small", LLAMA3, vocab_size=280)
    assert read_tokenizer(small).vocab_size == 280 and read_tokenizer(llama).vocab_size == 300
    ids, mask = pipeline(small, CONVERSATIONS[0])
    ids[8] = 290  # a token of the data's larger tokenizer
    assert codes(shard_findings(tmp_path, small, ids, mask, serving=small)) == ["EC338"]
    assert codes(shard_findings(tmp_path, small, ids, mask)) == ["EC338"]  # vocab_size: 280
    assert shard_findings(tmp_path, small, ids, mask, serving=llama, vocab_size=300) == []


# -- parity with the serving renderer ----------------------------------------------------


def parity(data: Path, serving: Path, convs=CONVERSATIONS, contract=None, url=None, **how):
    pairs = []
    for i, messages in enumerate(convs):
        ids, _ = pipeline(data, messages, **how)
        pairs.append((f"data_{i}.ckpt", ids, messages))
    return check_parity(contract, pairs, read_tokenizer(serving), render_url=url, timeout=5)


def test_shards_made_with_the_serving_renderer_match(llama):
    assert parity(llama, llama) == []


def test_another_template_is_ec340_with_the_first_divergence(tmp_path, llama):
    other = make_tokenizer(
        tmp_path / "other",
        LLAMA3,
        template=LLAMA3.template.replace("| trim }}", "| trim }}{{ ' ' }}"),
    )
    found = parity(llama, other)
    assert [f.code for f in found] == ["EC340"] * 3 + ["EC348"]
    first = found[0].extra
    assert set(first) >= {"index", "shard_tokens", "served_tokens", "shard_text", "served_text"}
    assert first["shard_tokens"] != first["served_tokens"]
    assert first["served_text"].startswith(first["served_text"][:4])
    assert "<- first divergence" in found[0].details
    assert found[-1].severity == "warning" and found[-1].found == "0 of 3"


def test_a_doubled_bos_is_ec341(llama):
    found = parity(llama, llama, bos_again=True)
    assert {f.code for f in found} == {"EC341", "EC348"}


def test_another_thinking_mode_is_ec342(tmp_path, qwen):
    retemplated = make_tokenizer(tmp_path / "rt", QWEN3, template=QWEN3_EMPTY_THINK_TEMPLATE)
    found = parity(retemplated, qwen)
    assert {f.code for f in found} == {"EC342", "EC348"}


def test_the_same_text_in_other_ids_is_ec343(tmp_path, llama):
    other = make_tokenizer(tmp_path / "rev", LLAMA3, text=[t.lower() for t in TEXT])
    found = parity(llama, other, contract=contract_of(tmp_path, llama))
    assert {f.code for f in found} == {"EC343", "EC348"}
    assert "files differ" in found[0].message
    # without the data's fingerprint: the shard's ids decode to the served text
    tok = read_tokenizer(llama)
    ids, _ = pipeline(llama, CONVERSATIONS[0])
    word = tok.encode("Hello")
    p = next(i for i in range(len(ids)) if ids[i : i + len(word)] == word)
    chars = [i for c in "Hello" for i in tok.encode(c)]
    assert chars != word
    shard = ids[:p] + chars + ids[p + len(word) :]
    found = check_parity(None, [("data_0", shard, CONVERSATIONS[0])], tok)
    assert [f.code for f in found] == ["EC343", "EC348"]


def test_a_shard_cut_at_max_length_still_matches(llama):
    ids, _ = pipeline(llama, CONVERSATIONS[1])
    tok = read_tokenizer(llama)
    assert check_parity(None, [("data_0", ids[:10], CONVERSATIONS[1])], tok) == []


@pytest.mark.parametrize(
    "template, why",
    [
        ("{{ raise_exception('no system role') }}", "no system role"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "range",
        ),
        ("{{ 'x' * 100000000 }}", "repetition"),
        ("{{ '{:>{w}}'.format(1, w=10**9) }}", "width"),
        ("{{ 'x'.ljust(10**9) }}", "width"),
        ("{{ '%*d' % (10**9, 1) }}", "width"),
        ("{{ ('x' * 4000000).replace('x', 'y' * 4000000) }}", "width"),
        ("{{ 'x' | center(10**9) }}", "width"),
        ("{{ range(99999) | join('y' * 4000000) }}", "width"),
        ("{{ messages | tojson(indent=10**9) }}", "indent"),
        ("{{ messages.append(1) }}", "unsafe"),
        ("{% if %}", "compile"),
    ],
)
def test_a_template_that_fails_or_runs_past_a_bound_is_ec346(tmp_path, llama, template, why):
    bad = make_tokenizer(tmp_path / "bad", LLAMA3, template=template)
    found = parity(llama, bad)
    assert [f.code for f in found] == ["EC346"], found
    assert why in found[0].message


def test_conversations_as_specforge_and_speculators_write_them(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [
        {"id": "a", "conversations": [{"role": "user", "content": "Hi"}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]},
        {"messages": [{"role": "user", "content": "Hi"}]},
        ["not", "a", "row"],
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{nope\n")
    found = read_rows(path, range(6))
    assert found[1] == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert found[2] == [{"role": "user", "content": "Hi"}]
    assert isinstance(found[3], str) and isinstance(found[4], str) and 5 not in found
    assert row_index("data_12") == 12 and row_index("hs_3") == 3 and row_index("x") is None


def test_conversations_read_as_each_trainer_reads_them(tmp_path):
    path = tmp_path / "c.jsonl"
    turns = [
        {"from": "gpt", "value": "dropped by SpecForge: before the first user turn"},
        {"from": "human", "value": "Q1"},
        {"from": "gpt", "value": "A1", "reasoning_content": "R1", "name": "x"},
        {"from": "human", "value": "Q2"},
        {"from": "llama-70b", "value": "A2"},  # speculators: an unknown role answers
    ]
    path.write_text(json.dumps({"conversations": turns}) + "\n")
    specforge = read_rows(path, [0])[0]
    assert [m["role"] for m in specforge] == ["user", "assistant", "user", "llama-70b"]
    assert specforge[1] == {"role": "assistant", "content": "A1"}  # GeneralParser's keys
    assert read_rows(path, [0], thinking=True)[0][1]["reasoning_content"] == "R1"
    rows = read_rows(path, range(5), format="speculators")  # one row per assistant turn
    assert sorted(rows) == [0, 1] and [len(rows[0]), len(rows[1])] == [3, 5]
    assert [m["role"] for m in rows[1]] == ["assistant", "user", "assistant", "user", "assistant"]
    assert rows[0][2]["thinking"] == rows[0][2]["reasoning_content"] == "R1"


class _VllmTokenizeStandIn(BaseHTTPRequestHandler):
    """A stand-in for vLLM's ``POST /tokenize`` (messages form) and ``POST
    /v1/chat/completions/render``, not vLLM: it renders with the folder's template and
    answers with vLLM's TokenizeResponse fields, or the render's ``token_ids``."""

    folder: Path
    broken = False

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["add_generation_prompt"] is False
        tok = read_tokenizer(self.folder)
        text = render(tok.chat_template, body["messages"], special=tok.special)
        ids = tok.encode(text)
        if self.path == "/v1/chat/completions/render":  # speculators' render_client's answer
            answer: dict = {"token_ids": ids}
        else:
            assert self.path == "/tokenize" and body["add_special_tokens"] is False
            answer = {"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None}
        data = json.dumps({"error": "no"} if self.broken else answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def vllm_tokenize(llama):
    handler = type("Handler", (_VllmTokenizeStandIn,), {"folder": llama})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_render_url_asks_vllms_tokenize(llama, vllm_tokenize):
    handler, url = vllm_tokenize
    assert parity(llama, llama, url=url) == []
    assert parity(llama, llama, url=url + "/v1/chat/completions/render") == []
    assert {f.code for f in parity(llama, llama, url=url, bos_again=True)} == {"EC341", "EC348"}
    handler.broken = True
    found = parity(llama, llama, url=url)
    assert [f.code for f in found] == ["EC347"] and "no list of token ids" in found[0].message


# -- infer drafts the section; check runs the families end to end ------------------------


def test_infer_drafts_a_section_the_contract_loads(tmp_path, qwen):
    shards = tmp_path / "shards"
    for i, messages in enumerate(REASONED * 2):
        write(shards, i, *pipeline(qwen, messages))
    files = sorted(shards.rglob("*.ckpt"))
    lines = tokenizer_lines(qwen, shard_files=files, format="specforge")
    section = draft_section(qwen, shard_files=files, format="specforge")
    assert section["thinking"] == "on" and section["bos"] == "none"
    assert section["think_token_ids"] == [3, 4]
    text = contract_text(qwen, shards).split("tokenizer:")[0] + "\n".join(lines) + "\n"
    contract = parse_contract(text, tmp_path / "c.yaml")
    assert contract.tokenizer is not None and contract.tokenizer.thinking == "on"


def test_infer_takes_the_target_folders_tokenizer_unless_told(tmp_path, llama, qwen):
    drafted = drafted_lines(None, None, llama, "../model", (), "specforge")
    assert drafted[1] == "  path: ../model" and any("assistant_header" in x for x in drafted)
    told = drafted_lines(qwen, "tok", llama, "../model", (), "specforge")
    assert told[1] == "  path: tok" and any("think_token_ids" in x for x in told)
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{nope")
    assert drafted_lines(None, None, broken, None, (), "specforge")[0].startswith(
        "# tokenizer: not drafted"
    )
    with pytest.raises(UsageError):
        drafted_lines(broken, None, None, None, (), "specforge")
    assert drafted_lines(None, None, tmp_path, None, (), "specforge") == []


def shards_and_conversations(tmp_path: Path, llama: Path) -> tuple[Path, Path]:
    """A shard per conversation, rendered with ``llama``'s template (the second with its BOS
    twice: EC341), and the conversations as JSONL: what the end-to-end runs check."""
    shards = tmp_path / "shards"
    for i, messages in enumerate(CONVERSATIONS):
        write(shards, i, *pipeline(llama, messages, bos_again=i == 1))
    conv = tmp_path / "conv.jsonl"
    conv.write_text("".join(json.dumps({"conversations": m}) + "\n" for m in CONVERSATIONS))
    return shards, conv


@pytest.mark.slow
def test_check_tokens_and_parity_end_to_end(tmp_path, llama, cli):
    shards, conv = shards_and_conversations(tmp_path, llama)
    contract = tmp_path / "c.yaml"
    contract.write_text(contract_text(llama, shards))
    res = cli(
        "check", contract, "--checks", "tokenizer,tokens,token-parity",
        "--conversations", conv, "--json", tmp_path / "r.json",
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    found = report["findings"]
    got = sorted({f["code"] for f in found})
    assert got == ["EC334", "EC341", "EC348"], got
    ec341 = next(f for f in found if f["code"] == "EC341")
    assert ec341["extra"]["index"] == 1 and ec341["extra"]["shard_tokens"][:2] == [0, 0]
    res = cli("check", contract, "--checks", "tokens", "--render-url", "ftp://x")
    assert res.returncode == 2 and "--render-url" in res.stderr
    drafted = cli("infer", shards, "--tokenizer", llama, "--name", "x", "--num-layers", "8")
    # random states: the norm bounds are not sharp (exit 1); the draft is printed anyway
    assert drafted.returncode in (0, 1) and "Traceback" not in drafted.stderr, drafted.stderr
    assert "tokenizer:" in drafted.stdout and "assistant_header:" in drafted.stdout


@pytest.mark.slow
def test_the_plugin_runs_the_token_families_as_items(tmp_path, llama, pytester):
    shards, conv = shards_and_conversations(tmp_path, llama)
    (pytester.path / "c.yaml").write_text(contract_text(llama, shards))
    args = ["-p", "no:cacheprovider", "-q", "--eagle-contract", "c.yaml", "--eagle-checks"]
    res = pytester.runpytest_subprocess(
        *args, "tokenizer,tokens,token-parity", "--eagle-conversations", str(conv)
    )
    res.assert_outcomes(passed=3, failed=2)  # tokenizer, 2 shards' tokens; 1 shard, parity
    assert "EC334" in res.stdout.str() and "EC341" in res.stdout.str()
    res = pytester.runpytest_subprocess(*args, "tokens", "--eagle-render-url", "ftp://x")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "--eagle-render-url" in res.stderr.str()


# -- issue 37 item 1: the shards the command names, and nothing compared is no pass --------


def _other_template(tmp_path: Path) -> Path:
    """The llama tokenizer with a template that renders one space more after each turn."""
    return make_tokenizer(
        tmp_path / "other",
        LLAMA3,
        template=LLAMA3.template.replace("| trim }}", "| trim }}{{ ' ' }}"),
    )


@pytest.mark.slow
def test_token_parity_reads_the_shards_on_the_command_line(tmp_path, llama, cli):
    """The contract's own shards match; the folder the command names was rendered with
    another template: the run compares that folder (EC340), not the contract's."""
    _, conv = shards_and_conversations(tmp_path, llama)
    good = tmp_path / "good"  # the contract's set: every shard as the serving renderer makes it
    for i, messages in enumerate(CONVERSATIONS):
        write(good, i, *pipeline(llama, messages))
    other = tmp_path / "other-shards"
    retemplated = _other_template(tmp_path)
    for i, messages in enumerate(CONVERSATIONS):
        write(other, i, *pipeline(retemplated, messages))
    contract = tmp_path / "c.yaml"
    contract.write_text(contract_text(llama, good))
    args = ["--checks", "token-parity", "--conversations", conv]
    own = cli("check", contract, *args)
    assert own.returncode == 0, own.stdout + own.stderr
    assert "on 3 shard(s)" in own.stdout, own.stdout  # the shards it compared, counted
    named = cli("check", contract, other, *args, "--json", tmp_path / "r.json")
    assert named.returncode == 1, named.stdout + named.stderr
    found = json.loads((tmp_path / "r.json").read_text())["findings"]
    assert {f["code"] for f in found} == {"EC340", "EC348"}, found
    assert all("other-shards" not in f["message"] for f in found)  # labels as the command's
    assert "on 3 shard(s)" in named.stdout, named.stdout


@pytest.mark.slow
def test_token_parity_that_compared_nothing_does_not_pass(tmp_path, llama, cli, pytester):
    """Every shard unreadable: the run says which (EC001/EC002), never 'ok ... 0 shard(s)'."""
    _, conv = shards_and_conversations(tmp_path, llama)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "data_0.ckpt").write_bytes(b"not a torch file")
    contract = tmp_path / "c.yaml"
    contract.write_text(contract_text(llama, broken))
    res = cli("check", contract, "--checks", "token-parity", "--conversations", conv)
    assert res.returncode == 1, res.stdout + res.stderr
    assert not res.stdout.strip().splitlines()[-1].startswith("ok"), res.stdout
    assert "EC001" in res.stdout or "EC002" in res.stdout, res.stdout
    # the plugin alike: the item fails with the read error, it does not pass
    (pytester.path / "c.yaml").write_text(contract_text(llama, broken))
    run = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--eagle-contract", "c.yaml",
        "--eagle-checks", "token-parity", "--eagle-conversations", str(conv),
    )  # fmt: skip
    assert run.parseoutcomes().get("passed", 0) == 0, run.stdout.str()
