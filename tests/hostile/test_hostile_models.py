"""Hostile target model folders (issue 16), driven through ``eagle-contract identify`` and
``check --target-model`` as users run them: exit 2 with a clear message, never a
traceback, never a file outside the folder opened, no code from the folder run, memory
bounded (3 GiB address space) and nothing in the folder changed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_hostile_contracts import MARKER, refused, run_cli

from pytest_eagle_contract.errors import UsageError
from pytest_eagle_contract.limits import JSON_MAX_BYTES_ENV
from pytest_eagle_contract.models.target import INDEX, TargetModel
from pytest_eagle_contract.models.tiny import TinySpec, tiny_target
from pytest_eagle_contract.shards.writing import write_shard

SPEC = TinySpec()
PAYLOAD = f"open({MARKER!r}, 'w').write('ran')\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A good tiny target folder and a shard of its width and vocabulary."""
    root = tmp_path_factory.mktemp("hostile-models")
    tiny_target(SPEC).save_pretrained(root / "model")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, SPEC.vocab_size, (24,), generator=g)
    states = [torch.randn(24, SPEC.hidden_size, generator=g).bfloat16() for _ in range(3)]
    shard = write_shard(root / "shards", "speculators-v1", 0, ids, torch.ones(24).long(), states)
    return root / "model", shard


def _config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _index(folder: Path, weight_map: object) -> None:
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _weights(folder: Path) -> Path:
    return folder / "model.safetensors"


def _truncate(folder: Path) -> None:
    data = _weights(folder).read_bytes()
    _weights(folder).write_bytes(data[: len(data) // 2])


def _huge_header(folder: Path) -> None:
    data = bytearray(_weights(folder).read_bytes())
    data[:8] = struct.pack("<Q", 1 << 62)
    _weights(folder).write_bytes(bytes(data))


def _pickle_only(folder: Path) -> None:
    _weights(folder).unlink()

    class Payload:
        def __reduce__(self) -> tuple[object, ...]:
            return (exec, (PAYLOAD,))

    torch.save({"model.embed_tokens.weight": Payload()}, folder / "pytorch_model.bin")


def _remote_code(folder: Path) -> None:
    _config(
        folder,
        model_type="evil",
        architectures=["EvilForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_evil.EvilConfig",
            "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
        },
    )
    for name in ("configuration_evil.py", "modeling_evil.py", "__init__.py"):
        (folder / name).write_text(PAYLOAD)


def _symlink_out(folder: Path) -> None:
    (folder / "link.safetensors").symlink_to("/etc/passwd")
    _index(folder, {"model.embed_tokens.weight": "link.safetensors"})


def _embedding_1d(folder: Path) -> None:
    _replace(folder, "model.embed_tokens.weight", torch.zeros(7))


# name -> (change to a copy of the good folder, words the error must carry); through the CLI
CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "config-list": (lambda d: (d / "config.json").write_text("[1, 2]"), ("JSON list",)),
    "config-not-json": (
        lambda d: (d / "config.json").write_bytes(os.urandom(64)),
        ("cannot read config.json",),
    ),
    "config-sparse-huge": (
        lambda d: os.truncate(d / "config.json", 8 << 30),
        ("larger than", JSON_MAX_BYTES_ENV),
    ),
    "config-dev-zero": (
        lambda d: ((d / "config.json").unlink(), (d / "config.json").symlink_to("/dev/zero")),
        ("config.json links to /dev/zero, outside the model folder",),
    ),
    "layers-1e9": (
        lambda d: _config(d, num_hidden_layers=1_000_000_000),
        ("num_hidden_layers is 1000000000", "[1, 1024]"),
    ),
    "hidden-size-float": (lambda d: _config(d, hidden_size=64.0), ("hidden_size is 64.0",)),
    "weights-garbage": (
        lambda d: _weights(d).write_bytes(os.urandom(4096)),
        ("not a readable safetensors file",),
    ),
    "embedding-1d": (_embedding_1d, ("model.embed_tokens.weight is (7,)",)),
    "index-dotdot": (
        lambda d: _index(d, {"model.embed_tokens.weight": "../../etc/passwd"}),
        ("outside the model folder",),
    ),
    "index-symlink-out": (_symlink_out, ("outside the model folder",)),
    "pickle-only": (_pickle_only, ("no safetensors files", ".bin weights are never read")),
    "remote-code": (_remote_code, ("transformers cannot build it",)),
    "more-layers-than-weights": (
        lambda d: _config(d, num_hidden_layers=48),
        ("describes", "weights, its safetensors files hold"),
    ),
}
# The rest of each family, through TargetModel.open (what the CLI and plugin call).
OPEN_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "config-deep": (
        lambda d: (d / "config.json").write_text("[" * 200_000),
        "cannot read config.json",
    ),
    "config-utf16": (
        lambda d: (d / "config.json").write_bytes((d / "config.json").read_text().encode("utf-16")),
        "cannot read config.json",
    ),
    "config-missing": (lambda d: (d / "config.json").unlink(), "no such file"),
    "hidden-size-string": (lambda d: _config(d, hidden_size="64"), "hidden_size is 64"),
    "hidden-size-bool": (lambda d: _config(d, hidden_size=True), "hidden_size is True"),
    "no-hidden-size": (lambda d: _config(d, hidden_size=None), "hidden_size is None"),
    "layers-zero": (lambda d: _config(d, num_hidden_layers=0), "num_hidden_layers is 0"),
    "vocab-2**40": (lambda d: _config(d, vocab_size=2**40), "vocab_size"),
    "eps-nan": (
        lambda d: (d / "config.json").write_text(
            (d / "config.json").read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN')
        ),
        "rms_norm_eps is nan",
    ),
    "eps-string": (lambda d: _config(d, rms_norm_eps="tiny"), "rms_norm_eps is tiny"),
    "architectures-string": (lambda d: _config(d, architectures="Llama"), "architectures"),
    "weights-truncated": (_truncate, "not a readable safetensors file"),
    "weights-huge-header": (_huge_header, "not a readable safetensors file"),
    "weights-empty": (lambda d: _weights(d).write_bytes(b""), "not a readable safetensors"),
    "weights-directory": (
        lambda d: (_weights(d).unlink(), _weights(d).mkdir()),
        "not a regular file",
    ),
    "weights-fifo": (
        lambda d: (_weights(d).unlink(), os.mkfifo(_weights(d))),
        "not a regular file",
    ),
    "index-absolute": (
        lambda d: _index(d, {"model.embed_tokens.weight": "/dev/zero"}),
        "outside the model folder",
    ),
    "index-nul": (lambda d: _index(d, {"x": "a\u0000.safetensors"}), "outside the model folder"),
    "index-not-a-map": (lambda d: _index(d, ["model.safetensors"]), "no weight_map"),
    "index-values-not-names": (lambda d: _index(d, {"x": 1}), "no weight_map"),
    "index-missing-file": (lambda d: _index(d, {"x": "nothere.safetensors"}), "not a regular file"),
    "index-not-json": (lambda d: (d / INDEX).write_text("{"), f"cannot read {INDEX}"),
    "config-link-out": (
        lambda d: ((d / "config.json").unlink(), (d / "config.json").symlink_to("/etc/hostname")),
        "outside the model folder",
    ),
    "link-loop": (
        lambda d: (_weights(d).unlink(), _weights(d).symlink_to(_weights(d))),
        "model.safetensors",
    ),
    "norm-wrong-shape": (
        lambda d: _replace(d, "model.norm.weight", torch.ones(3)),
        "final norm weight is (3,)",
    ),
    "head-integers": (
        lambda d: _replace(d, "lm_head.weight", torch.ones(512, 64).long()),
        "torch.int64, not floating-point",
    ),
}


def _replace(folder: Path, name: str, tensor: torch.Tensor) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(_weights(folder))
    tensors[name] = tensor
    save_file(tensors, _weights(folder))


def _changed(tmp_path: Path, base: tuple[Path, Path], change: Callable[[Path], None]) -> Path:
    """A copy of the tiny target at ``tmp_path/model``, ``change`` made to it."""
    folder = tmp_path / "model"
    shutil.copytree(base[0], folder)
    change(folder)
    return folder


@pytest.mark.parametrize(("change", "words"), OPEN_CASES.values(), ids=list(OPEN_CASES))
def test_hostile_model_folder_fails_to_open_cleanly(
    tmp_path: Path, base: tuple[Path, Path], change: Callable[[Path], None], words: str
) -> None:
    folder = _changed(tmp_path, base, change)
    with pytest.raises(UsageError, match=re.escape(words)):
        model = TargetModel.open(folder)
        model.embedding, model.final_norm_weight, model.lm_head  # noqa: B018


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.stat().st_size < 1 << 26
    }


@pytest.mark.slow
@pytest.mark.parametrize(("change", "words"), CASES.values(), ids=list(CASES))
def test_hostile_model_folder_is_a_usage_error(
    tmp_path: Path, base: tuple[Path, Path], change: Callable[[Path], None], words: tuple[str, ...]
) -> None:
    folder = _changed(tmp_path, base, change)
    before = _digest(folder)
    res = run_cli("identify", base[1], "--target-model", folder, cwd=tmp_path)
    refused(res, f"target model {folder}", *words)
    assert not (tmp_path / MARKER).exists() and not (folder / MARKER).exists()
    assert _digest(folder) == before


def test_check_turns_a_bad_target_into_a_usage_error(
    tmp_path: Path, base: tuple[Path, Path]
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(base[0], folder)
    _index(folder, {"model.embed_tokens.weight": "../../etc/passwd"})
    contract = tmp_path / "c.yaml"
    contract.write_text(
        f"contract: c\nversion: 1\ntarget: {{num_hidden_layers: 8, "
        f"hidden_size: 64, model: model}}\ntraining:\n  shards: "
        f"{base[1].parent}\n  slots: [{{layer: embed}}, {{layer: residual:4}}, "
        f"{{layer: residual:8}}]\n"
    )
    refused(
        run_cli("check", contract, "--checks", "evidence", cwd=tmp_path), "outside the model folder"
    )


@pytest.mark.slow
def test_remote_code_of_a_known_architecture_is_never_imported(
    tmp_path: Path, base: tuple[Path, Path]
) -> None:
    """auto_map beside a model_type transformers knows: the built-in class is used."""
    folder = tmp_path / "model"
    shutil.copytree(base[0], folder)
    _config(folder, auto_map={"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"})
    (folder / "modeling_evil.py").write_text(PAYLOAD)
    res = run_cli("identify", base[1], "--target-model", folder, cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / MARKER).exists()


def test_hugging_face_cache_snapshots_are_read(tmp_path: Path, base: tuple[Path, Path]) -> None:
    """Every file of a hub snapshot is a link into ../../blobs: that is inside."""
    repo = tmp_path / "models--x--tiny"
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in base[0].iterdir():
        blob = repo / "blobs" / hashlib.sha256(file.name.encode()).hexdigest()
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(Path("../../blobs") / blob.name)
    model = TargetModel.open(snapshot)
    assert model.embedding.shape == (SPEC.vocab_size, SPEC.hidden_size)
    other = tmp_path / "other"
    other.mkdir()
    (snapshot / "stray.safetensors").symlink_to(other / "x")
    (other / "x").write_bytes(_weights(base[0]).read_bytes())
    with pytest.raises(UsageError, match="outside the model folder"):
        TargetModel.open(snapshot)
