"""The JSON report: the interface other tools consume, versioned by ``schema_version`` and
described by the published schema ``reports/schema/report-v1.schema.json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import CheckRun

SCHEMA_VERSION = 1
SCHEMA_FILE = "report-v1.schema.json"


def check_report(run: CheckRun) -> dict[str, Any]:
    """One contract's check: verdict, engine, layout per engine version, units, findings."""
    from .layout import TrainingSide, layout_spans
    from .run import content_sha256

    contract = run.contract
    serving = contract.serving
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "check",
        "contract": str(contract.path),
        "name": contract.name,
        "contract_sha256": content_sha256(contract.path),
        "ok": run.ok,
        "complete": run.complete,
        "interrupted": run.interrupted,
        "not_run": run.not_run,
        "summary": run.summary,
        "engine": None if serving is None else {"name": serving.engine, "version": serving.version},
        "layout": [span.to_dict() for span in layout_spans(contract, TrainingSide.of(run))],
        "units": [
            {"check": u.check, "shard": u.shard, "findings": [f.to_dict() for f in u.findings]}
            for u in run.units
        ],
        "findings": [f.to_dict() for f in run.findings],
    }


def session_report(runs: list[CheckRun]) -> dict[str, Any]:
    """A pytest session's contracts, one check report each."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "session",
        "ok": all(run.ok for run in runs),
        "complete": all(run.complete for run in runs),
        "interrupted": any(run.interrupted for run in runs),
        "reports": [check_report(r) for r in runs],
    }


def stamped(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the version and kind in front (the sharpness report)."""
    return {"schema_version": SCHEMA_VERSION, "kind": kind, **data}


MARK = b'"schema_version"'  # in the head of every report: a previous one may be replaced


def write(
    path: Path, data: dict[str, Any], flag: str = "--json", reads: Sequence[Path] = ()
) -> None:
    """Write the report atomically, never onto an input or a file that is not a report."""
    from ..outputs import write_text

    write_text(path, json.dumps(data, indent=2, default=str) + "\n", flag, reads=reads, ours=MARK)


def schema_path() -> Path:
    return Path(str(resources.files(__package__).joinpath("schema", SCHEMA_FILE)))


@cache
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(schema_path().read_text("utf-8"))
    return data


def problems(data: Any) -> list[str]:
    """Where ``data`` breaks the published schema ([] when it is a valid report)."""
    from jsonschema import Draft202012Validator

    kind = data.get("kind") if isinstance(data, dict) else None
    whole = schema()
    if kind in whole["properties"]["kind"]["enum"]:  # that kind's errors, not oneOf's
        whole = {k: v for k, v in whole.items() if k != "oneOf"}
        whole["allOf"] = [{"$ref": f"#/$defs/{kind}"}]
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in Draft202012Validator(whole).iter_errors(data)
    ]
