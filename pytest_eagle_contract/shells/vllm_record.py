"""``eagle-contract record --vllm-files DIR``: vLLM's hidden-state files as capture files.

The files (``ExampleHiddenStatesConnector``'s ``{request_id}.safetensors``, speculators'
``hs_{i}.safetensors``) say nothing of their layers, so the command takes the ids the server
was launched with (``--layer-ids``) and the draft's (``--fc-ids``, default the contract's
serving side when its engine is vllm). See docs/verify-against-server.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .exit_codes import EXIT_FINDINGS, EXIT_OK, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from ..capture.vllm_files import Launch
    from ..contract.model import Contract

MAX_FILES = 100_000


def add_arguments(rec: argparse.ArgumentParser) -> None:
    """The vLLM options of ``record``."""
    rec.add_argument(
        "--layer-ids",
        type=int,
        nargs="+",
        metavar="ID",
        help="vLLM: the eagle_aux_hidden_state_layer_ids the extract_hidden_states server "
        "was launched with (speculators' launch_vllm.py default: 2, L//2, L-3, L)",
    )
    rec.add_argument(
        "--fc-ids",
        type=int,
        nargs="+",
        metavar="ID",
        help="vLLM: the draft's aux layer ids, the captured states its fc takes (default: "
        "the contract's serving side when its engine is vllm)",
    )
    rec.add_argument("--vllm-version", metavar="V", help="vLLM: the server's release")


def launch_of(args: argparse.Namespace, contract: Contract) -> Launch:
    from ..capture.vllm_files import Launch, speculators_default_ids

    target = contract.target
    if not args.layer_ids:
        raise UsageError(
            "--layer-ids: the ids the vLLM server captured (its files do not say); "
            f"speculators' launch_vllm.py default for L={target.num_hidden_layers} is "
            f"{' '.join(map(str, speculators_default_ids(target.num_hidden_layers)))}"
        )
    bad = [
        i for i in args.layer_ids + (args.fc_ids or []) if not 0 <= i <= target.num_hidden_layers
    ]
    if bad:
        raise UsageError(f"layer ids {bad} outside 0..{target.num_hidden_layers} (the target's L)")
    return Launch(
        layer_ids=tuple(args.layer_ids),
        fc_ids=tuple(args.fc_ids or _contract_fc_ids(contract)),
        num_layers=target.num_hidden_layers,
        hidden_size=target.hidden_size,
        arch=(contract.serving.arch if contract.serving else None) or target.arch,
        version=args.vllm_version,
    )


def _contract_fc_ids(contract: Contract) -> list[int]:
    from ..engines.resolve import engine_aux_ids, get_engine

    serving = contract.serving
    if serving is None or serving.engine != "vllm":
        raise UsageError(
            "--fc-ids: the draft's aux layer ids as vLLM reads them (the contract's serving "
            f"engine is {serving.engine if serving else 'not given'}, whose ids number "
            "layers another way)"
        )
    ids = engine_aux_ids(serving)
    if ids is None:
        default = get_engine("vllm").default_ids(contract.target.num_hidden_layers)
        if default is None:
            raise UsageError("--fc-ids: the contract names no ids and vLLM has no default")
        return default
    return list(ids)


def record_url(args: argparse.Namespace, contract: Contract, paths: list[Path]) -> int:
    """Ask the vLLM at ``--vllm-url`` for each shard's ids and convert the file it writes;
    stops at the first shard it cannot answer, with the rule code (as for SGLang)."""
    import dataclasses

    from ..capture.record import token_ids
    from ..capture.transport import check_timeout, check_url
    from ..capture.vllm_client import hidden_states_path, served_model, wait_and_read
    from ..capture.vllm_files import to_capture
    from ..errors import CaptureError, CaptureFileError, ServerUnreachable, ShardReadError
    from ..shards.reading import read_sample

    url, timeout = check_url(args.vllm_url), check_timeout(args.timeout)
    launch = launch_of(args, contract)
    fmt = contract.training.format if contract.training else "auto"
    written = 0
    try:
        model, version = served_model(url, min(timeout, 10.0))
        launch = dataclasses.replace(launch, version=launch.version or version)
        for path in paths:
            try:
                sample = read_sample(path, fmt)
            except ShardReadError as exc:
                raise UsageError(f"{path}: {exc.code} {exc.message}") from None
            ids = token_ids(sample.input_ids)
            if ids is None:
                raise UsageError(f"{path}: the shard has no usable input_ids")
            states = wait_and_read(hidden_states_path(url, model, ids, timeout), timeout)
            try:
                to_capture(states, launch, args.out, source="vllm-http", shard=path.name)
            except CaptureFileError as exc:
                raise CaptureError("EC705", f"the server's file: {exc.message}") from None
            written += 1
    except CaptureError as exc:
        print(f"eagle-contract record: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(exc, ServerUnreachable) else EXIT_FINDINGS
    print(f"recorded {written} capture file(s) in {args.out} from vLLM {launch.version or '?'}")
    return EXIT_OK


def record_files(args: argparse.Namespace, contract: Contract) -> int:
    """Convert every vLLM file under ``--vllm-files``; a bad file is EC707 (the rest go on)."""
    from ..capture.vllm_files import read_vllm_file, to_capture
    from ..errors import CaptureFileError
    from ..tree import files_matching

    if args.paths:
        raise UsageError(
            "--vllm-files converts the server's own files; shard paths are for --sglang-url"
        )
    launch = launch_of(args, contract)
    files: list[Path] = []
    for root in args.vllm_files:
        if not root.exists():
            raise UsageError(f"--vllm-files {root}: does not exist")
        try:
            found = files_matching(root, ["*.safetensors"], regular=False)
            files += sorted(found) if root.is_dir() else [root]
        except OSError as exc:
            raise UsageError(f"--vllm-files {root}: cannot list it: {exc}") from None
        if len(files) > MAX_FILES:
            raise UsageError(f"--vllm-files: over {MAX_FILES} files; convert a sample")
    if not files:
        raise UsageError(
            f"--vllm-files: no *.safetensors under {', '.join(map(str, args.vllm_files))}"
        )
    written, failed = 0, 0
    for path in files:
        try:
            to_capture(read_vllm_file(path), launch, args.out)
            written += 1
        except CaptureFileError as exc:
            failed += 1
            print(f"eagle-contract record: EC707 {exc.message}", file=sys.stderr)
        except OSError as exc:
            raise UsageError(f"--out {args.out}: cannot write a capture file: {exc}") from None
    print(f"recorded {written} capture file(s) in {args.out} from vLLM's files")
    if failed:
        print(f"{failed} file(s) refused (EC707 above)", file=sys.stderr)
    return EXIT_FINDINGS if failed else EXIT_OK
