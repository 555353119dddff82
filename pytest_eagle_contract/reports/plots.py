"""The HTML report's plots as inline SVG, drawn with matplotlib (the ``report`` extra)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .measure import Measurements, TargetCurve
    from .run import ProbeEstimate

EXTRA = "pip install 'pytest-eagle-contract[report]'"


def available() -> bool:
    return find_spec("matplotlib") is not None


def _pyplot() -> Any:
    import sys

    if "matplotlib.pyplot" not in sys.modules:
        return _first_pyplot()
    import matplotlib.pyplot as plt

    return plt


def _first_pyplot() -> Any:
    """matplotlib imported: where its config and font-cache folder (``~/.config/matplotlib``)
    cannot be written it uses a temporary one and logs two warnings; that is one cache
    skipped, noted as the package's own are (under ``-v``)."""
    import logging
    import tempfile

    log = logging.getLogger("matplotlib")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    finally:
        log.setLevel(level)
    matplotlib.rcParams["svg.hashsalt"] = "eagle-contract"  # the same report, the same bytes
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: smaller, found by search
    where = matplotlib.get_cachedir()
    if where.startswith(str(Path(tempfile.gettempdir()) / "matplotlib-")):
        from ..version import cache_skipped

        cache_skipped("matplotlib's cache", f"its folder cannot be written ({where} instead)")
    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def norms_plot(m: Measurements) -> str | None:
    """Per slot: every shard's median per-token norm (points, box) against the bounds."""
    slots = [s for s in m.slots if s.medians]
    if not slots:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(slots), figsize=(2.6 * len(slots), 3.2), squeeze=False)
    for ax, s in zip(axes[0], slots):
        values = [v for _, v in s.medians]
        if s.bounds is not None:
            ax.axhspan(s.bounds[0], s.bounds[1], color="tab:green", alpha=0.2, label="bounds")
        inside = [s.bounds is None or s.bounds[0] <= v <= s.bounds[1] for v in values]
        ax.boxplot(values, widths=0.5)
        ax.scatter(
            [1.0] * len(values),
            values,
            s=14,
            zorder=3,
            c=["tab:blue" if ok else "tab:red" for ok in inside],
        )
        ax.set_title(f"slot {s.slot} ({s.layer})", fontsize=9)
        ax.set_xticks([])
        lows = [*values, *(s.bounds[:1] if s.bounds else ())]
        highs = [*values, *(s.bounds[1:] if s.bounds and s.bounds[1] != float("inf") else ())]
        pad = 0.1 * (max(highs) - min(lows) or 1.0)
        ax.set_ylim(min(lows) - pad, max(highs) + pad)
    axes[0][0].set_ylabel("median per-token L2 norm, per shard")
    fig.suptitle("per-shard median norms (green: the contract's bounds, red: outside)", fontsize=10)
    return _svg(fig)


def curve_plot(curve: TargetCurve) -> str:
    """The target's per-layer norm curve with each slot placed at its declared layer."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    xs = list(range(len(curve.layers)))
    ax.plot(xs, curve.medians, "-o", color="tab:gray", markersize=4, label="target")
    for slot, layer, x, median in curve.placed:
        ax.scatter([x], [median], s=60, zorder=3, marker="D", label=f"slot {slot} as {layer}")
    ax.set_xticks(xs, curve.layers, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("median per-token L2 norm")
    ax.set_title(
        f"the target's per-layer norms on {curve.shard}\n"
        "a slot off the curve is not the layer it is declared as",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return _svg(fig)


def probe_plot(probe: Sequence[ProbeEstimate]) -> str:
    """The probe's acceptance rate per draft step, one bar per layout it estimated."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    width = 0.8 / len(probe)
    for n, e in enumerate(probe):
        steps = [s + 1 + (n - (len(probe) - 1) / 2) * width for s in range(len(e.per_step))]
        ax.bar(steps, e.per_step, width, label=f"{e.name}: acceptance length {e.accept_length:.2f}")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(1, max(len(e.per_step) for e in probe) + 1))
    ax.set_xlabel("draft step")
    ax.set_ylabel("acceptance rate")
    ax.set_title("probe: acceptance per draft step", fontsize=9)
    ax.legend(fontsize=8)
    return _svg(fig)
