"""The MLX rules against every mlx-vlm wheel (``tox -e mlx-releases``): re-derives
``engines/mlx_rules.json`` with ``scripts/gen_mlx_rules.py`` (each release's own
``Eagle3Config.__post_init__`` run on probe configs, its drafter's fc, its models' capture
loops) and fails on any difference. Needs the wheels: set EAGLE_CONTRACT_MLX_WHEELS=DIR
(``scripts/gen_mlx_rules.py DIR --download`` fetches them). Never part of the default run.
"""

from __future__ import annotations

from release_helpers import wheel_folder

WHEELS = wheel_folder("EAGLE_CONTRACT_MLX_WHEELS", "mlx-vlm", "mlx-releases")

import gen_mlx_rules as gen  # noqa: E402


def test_the_rules_file_is_what_the_releases_code_says():
    assert gen.main([str(WHEELS), "--check"]) == 0


def test_the_drafter_kinds_are_what_the_releases_code_says():
    """``engines/mlx_drafters_rules.json`` (EC523, EC524) re-derived by
    ``scripts/gen_mlx_drafters.py`` from the same wheels."""
    import gen_mlx_drafters

    assert gen_mlx_drafters.main([str(WHEELS), "--check"]) == 0
