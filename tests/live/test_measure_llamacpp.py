"""eagle-contract measure against the REAL llama-server (llama.cpp as the llama-cpp-python
0.3.36 sdist vendors it), running EAGLE-3 speculative decoding on CPU with a real draft.

The binary and the tiny models come from the llamacpp-live work: ``scripts/build_llamacpp.py``
caches the build under ``~/.cache/eagle-contract/llamacpp/0.3.36/`` and
``tests/llamacpp_live.py`` makes the trained target, the draft distilled on the layout
llama.cpp feeds for ids [2, 4, 5], and their GGUFs. Without them these tests skip, saying
what to run. The shifted draft is the same weights converted with ids [3, 5, 6]: llama.cpp
then feeds it the next layer of each.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import no_traceback

from pytest_eagle_contract.shards.writing import write_shard

BUILD = "python scripts/build_llamacpp.py  # llama.cpp 0.3.36, ~15-30 min on 2 cores"
SERVER = (
    Path(
        os.environ.get("EAGLE_CONTRACT_LLAMACPP_CACHE")
        or Path.home() / ".cache/eagle-contract/llamacpp"
    )
    / "0.3.36"
    / "bin"
    / "llama-server"
)
SHIFTED_IDS = [3, 5, 6]
PROMPT, SHARDS = 16, 8
NEW = 46  # 1 from the prefill, then 9 full rounds of 4 drafted + 1: no round cut by the budget

try:
    import llamacpp_live as live
except ImportError:  # the llamacpp-live helpers are not in this checkout
    live = None


def _converter() -> Path | None:
    """The vendored convert_hf_to_gguf.py the build keeps (``<version>/converter/``), else
    the one in the unpacked sdist, with its ``conversion`` and ``gguf-py`` beside it."""
    version = SERVER.parent.parent
    vendored = version / "src" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
    for folder in (version / "converter", vendored):
        if all(
            (folder / name).exists() for name in ("convert_hf_to_gguf.py", "conversion", "gguf-py")
        ):
            return folder / "convert_hf_to_gguf.py"
    return None


def _why_not() -> str | None:
    if live is not None and (why := live.missing()) is not None:
        return why  # asked for (tox -e llamacpp-live) and built, or skipped
    if not SERVER.exists():
        return f"no llama-server at {SERVER}: run `{BUILD}`"
    if live is None:
        return "tests/llamacpp_live.py (the tiny target and draft) is not in this checkout"
    if _converter() is None:
        return f"no vendored converter beside {SERVER.parent}: run `{BUILD}`"
    import importlib.util

    if importlib.util.find_spec("sentencepiece") is None:
        return "the vendored converter imports sentencepiece: pip install sentencepiece"
    return None


def _convert(src: Path, out: Path, target: Path | None = None) -> Path:
    """``src`` (an HF folder) to an f32 GGUF by the vendored converter."""
    converter = _converter()
    assert converter is not None
    cmd = [sys.executable, str(converter), str(src), "--outtype", "f32", "--outfile", str(out)]
    if target is not None:
        cmd += ["--target-model-dir", str(target)]
    env = {**os.environ, "PYTHONPATH": str(converter.parent / "gguf-py"), "NO_LOCAL_GGUF": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and out.is_file(), res.stdout[-2000:] + res.stderr[-3000:]
    return out


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    assert live is not None
    root = tmp_path_factory.mktemp("llamacpp-measure")
    model = live.make_target(root / "target")
    draft = live.make_draft(model, root / "draft")
    shifted = live.draft_with_ids(draft, SHIFTED_IDS, root / "draft-shifted")
    target_gguf = _convert(root / "target", root / "target.gguf")
    return {
        "root": root,
        "target": root / "target",
        "draft": draft,
        "target.gguf": target_gguf,
        "trained.gguf": _convert(draft, root / "draft.gguf", root / "target"),
        "shifted.gguf": _convert(shifted, root / "draft-shifted.gguf", root / "target"),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(target: Path, draft: Path) -> Iterator[str]:
    port = _free_port()
    cmd = [
        str(SERVER),
        "-m", str(target),
        "-md", str(draft),
        "--spec-type", "draft-eagle3",
        "--spec-draft-n-max", str(live.STEPS if live else 4),
        "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0",
        "--metrics",
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", "512",
        "-np", "1",
        "-t", "1",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"llama-server exited: {proc.stderr.read()[-3000:]}")  # type: ignore[union-attr]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError("llama-server did not come up in 120 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _project(root: Path, floor: float, target: Path, draft: Path) -> Path:
    """Shards of the target's corpus: a PROMPT-token prompt, the rest the trained reply."""
    from pytest_eagle_contract.models.trained import corpus

    ids = corpus(SHARDS, PROMPT + NEW, 64, torch.Generator().manual_seed(7))
    for i, row in enumerate(ids):
        mask = torch.zeros(row.numel(), dtype=torch.long)
        mask[PROMPT:] = 1
        slots = [torch.zeros(row.numel(), 64) for _ in range(4)]
        write_shard(root / "data", "specforge", i, row, mask, slots)
    contract = root / "c.yaml"
    contract.write_text(
        "contract: llamacpp-measured\nversion: 1\n"
        "target: {arch: LlamaForCausalLM, num_hidden_layers: 8, hidden_size: 64, "
        f"vocab_size: 66, model: {target}}}\n"
        "training:\n  format: specforge\n  shards: data\n  slots:\n"
        "    - {layer: residual:2}\n    - {layer: residual:4}\n    - {layer: residual:5}\n"
        "    - {layer: final_norm}\n  fc_input: [0, 1, 2]\n  target_slot: 3\n"
        f"serving:\n  engine: llama.cpp\n  draft_config: {draft}\n"
        f"  min_accept_length: {floor}\n"
    )
    return contract


def _measure(cli: Any, root: Path, url: str, *extra: object) -> tuple[Any, dict[str, Any]]:
    res = cli(
        "measure", "c.yaml", "--llama-server-url", url, "--max-new-tokens", NEW, "--json",
        *extra, cwd=root,
    )  # fmt: skip
    no_traceback(res)
    return res, json.loads(res.stdout)


def test_the_real_llama_server_passes_the_trained_draft_and_fails_the_shifted_one(
    models: dict[str, Path], tmp_path: Path, cli: Any
) -> None:
    root = tmp_path
    _project(root, 1.0, models["target"], models["draft"])
    for url in _serve(models["target.gguf"], models["trained.gguf"]):
        res, trained = _measure(cli, root, url, "--no-probe")
    m = trained["measured"]
    assert res.returncode == 0, res.stderr
    assert m["rounds_from"].startswith("/metrics") and not m["accept_length_is_lower_bound"]
    assert m["rounds"] > 0 and len(m["per_position"]) == 4
    assert m["accept_length"] == pytest.approx(1 + m["accepted"] / m["rounds"], abs=1e-4)
    floor = round(m["accept_length"] * 0.9, 3)  # the floor set from the trained draft
    _project(root, floor, models["target"], models["draft"])
    for url in _serve(models["target.gguf"], models["shifted.gguf"]):
        res, shifted = _measure(cli, root, url)
    s = shifted["measured"]
    assert res.returncode == 1, res.stdout
    assert s["accept_length"] < floor
    codes = [f["code"] for f in shifted["findings"]]
    assert codes == ["EC712"]
    assert f"below the floor {floor}" in shifted["findings"][0]["message"]
    assert shifted["probe"], "the contract names draft and target: the probe's rows"
