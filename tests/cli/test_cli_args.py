"""The command line as people type it: options and paths in any order."""

from __future__ import annotations

from pytest_eagle_contract.shells.demo import shipped_contract


def test_paths_after_options_are_checked_like_paths_before_them(tmp_path, cli):
    contract = tmp_path / "c.yaml"
    contract.write_text(shipped_contract().read_text())
    missing = tmp_path / "no-such-shards"
    for args in (
        ["check", contract, missing, "--sample", "2", "--no-sharpness"],
        ["check", contract, "--sample", "2", missing, "--no-sharpness"],
        ["check", contract, "--sample", "2", "--no-sharpness", missing],
    ):
        out = cli(*args)
        assert out.returncode == 2, out.stdout + out.stderr
        assert str(missing) in out.stderr and "unrecognized" not in out.stderr


def test_a_stray_option_is_still_an_error(tmp_path, cli):
    contract = tmp_path / "c.yaml"
    contract.write_text(shipped_contract().read_text())
    out = cli("check", contract, "--smaple", "2", tmp_path)
    assert out.returncode == 2
    assert "unrecognized arguments: --smaple 2" in out.stderr
    out = cli("schema", "extra-word")  # a command without shard paths takes no extra words
    assert out.returncode == 2 and "unrecognized arguments: extra-word" in out.stderr
