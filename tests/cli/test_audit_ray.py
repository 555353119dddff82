"""``eagle-contract audit --backend ray``: one task per file on a local Ray cluster started in
the test, and the same report as the local backend (tox -e ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_audit import CONTRACT, write_set


def _same_parts(report: dict) -> dict:  # type: ignore[type-arg]
    """Everything but how it ran (backend, seconds)."""
    return {k: v for k, v in report.items() if k != "cost"}


@pytest.mark.slow
def test_ray_and_local_give_the_same_report(tmp_path: Path) -> None:
    import ray

    from pytest_eagle_contract.shells.cli import main

    (tmp_path / "c.yaml").write_text(CONTRACT)
    write_set(tmp_path / "shards", 24, shifted={7})
    common = [str(tmp_path / "c.yaml"), "-q"]
    local = main(
        ["audit", *common, "--json", str(tmp_path / "local.json"), "--cache",
         str(tmp_path / "c1"), "--workers", "2"]
    )  # fmt: skip
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = main(
            ["audit", *common, "--backend", "ray", "--json", str(tmp_path / "ray.json"),
             "--cache", str(tmp_path / "c2")]
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert local == on_ray == 1  # the shifted shard stands out on both
    a = json.loads((tmp_path / "local.json").read_text())
    b = json.loads((tmp_path / "ray.json").read_text())
    assert _same_parts(a) == _same_parts(b)
    assert b["cost"]["backend"] == "ray" and b["read"] == 24
    assert {o["label"] for o in b["outliers"]} == {"data_7.pt"}
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == sorted(
        f"data_{i}.pt" for i in range(24)
    )
