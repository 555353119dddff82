"""Every dependency floor in pyproject.toml sits at or above the first release free of the
known advisories (issue 16: ``pyarrow>=14`` admitted 14.0.0, whose Arrow reader unpickles
extension metadata, CVE-2023-47248). A new dependency needs a row here."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"

# name -> (least safe version, the advisories that version is past)
SAFE: dict[str, tuple[str, str]] = {
    "setuptools": ("78.1.1", "CVE-2024-6345 (70.0.0), CVE-2025-47273 (78.1.1)"),
    "pytest": ("9.0.3", "CVE-2025-71176 predictable /tmp/pytest-of-{user} (9.0.3)"),
    "pyyaml": (
        "5.4",
        "CVE-2017-18342, CVE-2020-1747, CVE-2020-14343 full_load RCE (5.4); "
        "the loader uses no constructor at all",
    ),
    "jsonschema": ("4.18", "none known"),
    "numpy": (
        "2.0",
        "CVE-2021-33430, CVE-2021-41495, CVE-2021-41496 (1.22.0); np.vecdot is new in 2.0",
    ),
    "safetensors": ("0.4", "none known"),
    "torch": (
        "2.10",
        "CVE-2025-32434 weights_only bypass (2.6.0), CVE-2025-2953 (2.7.1), "
        "CVE-2025-3730 (2.8.0), CVE-2026-24747 weights_only unpickler memory "
        "corruption (2.10.0); CVE-2026-4538 (pt2 loader, unpatched) is not used",
    ),
    "transformers": (
        "5.3",
        "CVE-2024-11392/11393/11394 (4.48.0), CVE-2025-3263/3264 (4.51.0), "
        "CVE-2025-6051/6638/6921 ReDoS (4.53.0), CVE-2026-4372 config "
        "RCE despite trust_remote_code=False (5.3.0)",
    ),
    "pyarrow": (
        "23.0.1",
        "CVE-2023-47248 extension-type unpickling (14.0.1), CVE-2024-52338 "
        "(17.0.0), CVE-2026-25087 IPC reader use-after-free (23.0.1)",
    ),
    "pytest-xdist": ("3", "none known"),
    "hypothesis": ("6", "none known"),
    "matplotlib": ("3.8", "none known"),
    "hs-connectors": ("0.9", "none known"),
    "pre-commit": ("4.0", "none known"),
    "mkdocs": ("1.6", "CVE-2021-40978 dev-server path traversal (1.2.3)"),
    "mkdocs-material": ("9.5", "none known"),
    "virtualenv": ("20.26.6", "CVE-2024-53899 activation-script command injection (20.26.6)"),
    "ruff": ("0.6", "none known"),
    "mypy": ("1.10", "none known"),
    "types-pyyaml": ("0", "stubs only"),
    "types-jsonschema": ("0", "stubs only"),
    "ray": (
        "2.55.0",
        "CVE-2023-6019/6020/6021 (2.8.1), CVE-2025-62593 dashboard DNS rebinding RCE "
        "(2.52.0), CVE-2026-27482 (2.54.0), CVE-2026-41486 Arrow extension type "
        "deserialization (2.55.0); CVE-2023-48022 (disputed, unpatched): the audit starts "
        "a local cluster without a dashboard",
    ),
    "loguru": ("0.7.2", "CVE-2022-0338 (0.5.3)"),
    "openai": ("2.0", "none known"),
    "pydantic-settings": ("2.0", "none known"),
    "datasets": ("4.0", "none known; 4.0.0 drops dataset loading scripts (remote code)"),
    "sglang": (
        "0.5.10",
        "CVE-2026-3059 ZMQ pickle RCE (0.5.10), CVE-2026-3989 replay script "
        "(fixed in sgl-project/sglang#20904); the tool never starts its "
        "multimodal or disaggregation servers",
    ),
}


def _requirements() -> list[Requirement]:
    data = tomllib.loads(PYPROJECT.read_text("utf-8"))
    texts = list(data["build-system"]["requires"]) + list(data["project"]["dependencies"])
    for extra in data["project"]["optional-dependencies"].values():
        texts += extra
    return [Requirement(t) for t in texts]


def _floor(req: Requirement) -> Version | None:
    """The least version ``req`` admits (its ``>=``, ``==``, ``~=`` or ``>`` bound)."""
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=", ">")]
    return max(bounds, default=None)


@pytest.mark.parametrize("req", _requirements(), ids=str)
def test_floor_is_past_every_known_advisory(req: Requirement) -> None:
    name = req.name.lower()
    assert name in SAFE, f"{req}: add a row to SAFE (least safe version, advisories)"
    least, advisories = SAFE[name]
    floor = _floor(req)
    if Version(least) > Version("0"):
        assert floor is not None and floor >= Version(least), (
            f"{req} admits versions before {least}: {advisories}"
        )


def test_installed_versions_meet_the_floors() -> None:
    """The floors stay satisfiable by what is installed here (torch 2.13.0 CPU among it)."""
    for req in _requirements():
        try:
            installed = Version(importlib.metadata.version(req.name))
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra not installed (sglang)
        assert req.specifier.contains(installed, prereleases=True), f"{req}: {installed}"
