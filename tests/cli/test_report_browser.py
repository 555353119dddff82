"""The HTML report and the docs site's home page as people see them, in a real headless
Chromium (Debian's `chromium`; `.ci/run` installs it): at 1280 px and at a phone's 390 px
neither page scrolls sideways and its key headings and links are on screen; the report's
both plots are drawn inside the viewport, and with JavaScript off every finding, hint and
layout row is on the page (the report has no script at all). The measurements come from a
copy of the page with a measuring script appended, read back with `--dump-dom`. A
screenshot of each page at each width is kept for a person to look at: under
`$EAGLE_CONTRACT_ARTIFACTS/browser` (default `artifacts/browser`, git-ignored; `.ci/run`
keeps the folder as CI's artifact)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import build_docs_site

from pytest_eagle_contract.reports import plots
from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.shells.cli import main

CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
NEEDED = os.environ.get("EAGLE_CONTRACT_NEED_BROWSER") == "1"  # .ci/run sets it: no skip
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("EAGLE_CONTRACT_ARTIFACTS") or ROOT / "artifacts") / "browser"
pytestmark = [pytest.mark.slow]
needs_browser = pytest.mark.skipif(
    (CHROMIUM is None or not plots.available()) and not NEEDED,
    reason="needs Debian's chromium (.ci/run installs it) and matplotlib",
)


def test_ci_has_the_browser_it_needs() -> None:
    if not NEEDED:
        pytest.skip("EAGLE_CONTRACT_NEED_BROWSER=1 (.ci/run) makes a missing browser a failure")
    assert CHROMIUM is not None and plots.available()


FLAGS = [  # as the machine's notes say Chromium runs here: no network, a fresh profile
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MEASURE = """<script>
const W = document.documentElement.clientWidth;
const svgs = [...document.querySelectorAll('svg')].map(s => {
  const r = s.getBoundingClientRect(); return [r.left, r.right, r.width, r.height];
});
// drawn elements (not empty, not hidden: a site's closed search panel) past the right edge,
// outside any box that scrolls on its own (a code block, a wide table's wrapper)
const wide = [...document.querySelectorAll('body *')].filter(e => {
  const r = e.getBoundingClientRect();
  if (r.width === 0 || r.height === 0 || getComputedStyle(e).visibility === 'hidden') return false;
  let p = e.parentElement, scrolls = false;
  for (; p; p = p.parentElement) if (getComputedStyle(p).overflowX === 'auto') scrolls = true;
  return r.right > W + 1 && !scrolls;
}).map(e => e.tagName + '.' + e.className);
// each key [selector, text]: whether an element it names, holding the text, is on screen
const shown = e => { const r = e.getBoundingClientRect(), c = getComputedStyle(e);
  return r.width > 0 && r.height > 0 && r.left >= -1 && r.right <= W + 1
    && c.visibility !== 'hidden' && c.display !== 'none' && c.opacity !== '0'; };
const keys = KEYS.map(([sel, text]) => [sel, text,
  [...document.querySelectorAll(sel)].some(e => e.textContent.includes(text) && shown(e))]);
parent.postMessage(JSON.stringify({viewport: W, page: document.documentElement.scrollWidth,
                                   svgs, wide: wide.slice(0, 10), keys}), '*');
</script>"""
# The page in a frame as wide as the screen measured (headless Chromium's window is at least
# 500 px wide, so a phone's width is a frame's); the frame's script sends what it measured.
HOST = """<!DOCTYPE html><html><body style="margin:0">
<pre id="eagle-measure"></pre>
<script>addEventListener('message', e => {
  document.getElementById('eagle-measure').textContent = e.data; });</script>
<iframe src="measured.html" width="{width}" height="1800" style="border:0"></iframe>
</body></html>"""


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's buggy set, with the target: findings, hints, layout, both plots."""
    root = tmp_path_factory.mktemp("browser")
    demo.write_demo_shards(root, shards=3, save_target=True)
    report = root / "report.html"
    args = ["check", str(demo.shipped_contract()), str(root / "embed-in-front"), "-q"]
    more = ["--target-model", str(root / "target"), "--reference-capture"]
    more += ["--html-report", str(report)]
    assert main([*args, *more, "--annotations", "none"]) == 1
    return report


def _chromium(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={home / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(home)},
    )


REPORT_KEYS = [  # what a reader must see without scrolling sideways
    ("h1", "eagle-contract: FAILED"),
    ("h3", "Findings"),
    ("h3", "Layout: training"),
    ("h3", "Norms"),
]


def _measure(page: Path, tmp_path: Path, width: int, keys: list[tuple[str, str]]) -> dict:
    """What MEASURE finds on ``page`` shown in a frame ``width`` px wide. The measured copy
    sits beside the page, so the page's own relative links (a site's CSS) still resolve."""
    measured = page.parent / "measured.html"
    script = MEASURE.replace("KEYS", json.dumps(keys))
    measured.write_text(page.read_text().replace("</body>", script + "</body>"))
    host = page.parent / "host.html"
    host.write_text(HOST.replace("{width}", str(width)))
    done = _chromium(
        tmp_path,
        "--allow-file-access-from-files",
        "--window-size=1400,2000",
        "--virtual-time-budget=10000",
        "--dump-dom",
        host.as_uri(),
    )
    found = re.search(r'<pre id="eagle-measure">(.+?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-1000:] + done.stderr[-1000:]
    m: dict = json.loads(found.group(1).replace("&quot;", '"'))
    assert width - 20 <= m["viewport"] <= width, m  # the frame's own scrollbar aside
    return m


def _fits(m: dict, width: int, what: str) -> None:
    """The page measured does not scroll sideways, and its key elements are on screen."""
    assert m["page"] <= m["viewport"], f"{what} scrolls sideways at {width} px: {m}"
    assert m["wide"] == [], f"{what}: wider than the viewport at {width} px: {m['wide']}"
    hidden = [(sel, text) for sel, text, seen in m["keys"] if not seen]
    assert hidden == [], f"{what} at {width} px: not on screen: {hidden}"


SHOT = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{page}" width="{width}" height="{height}" style="border:0"></iframe>
</body></html>"""


def _screenshot(page: Path, tmp_path: Path, width: int, name: str, height: int = 2400) -> Path:
    """``page`` drawn ``width`` px wide (a frame: headless Chromium's window is at least
    500 px), cropped to the frame, kept under ARTIFACTS as ``name``-``width``.png."""
    from PIL import Image  # matplotlib's own dependency

    host = page.parent / "shot.html"
    host.write_text(
        SHOT.replace("{page}", page.name)
        .replace("{width}", str(width))
        .replace("{height}", str(height))
    )
    raw = tmp_path / "raw.png"
    _chromium(
        tmp_path,
        "--allow-file-access-from-files",
        "--hide-scrollbars",
        f"--window-size={max(width, 800)},{height}",
        "--virtual-time-budget=10000",
        f"--screenshot={raw}",
        host.as_uri(),
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"{name}-{width}.png"
    Image.open(raw).crop((0, 0, width, height)).save(out)
    return out


def _drawn(shot: Path) -> None:
    """The screenshot holds a page, not a blank frame: many colours, most of them dark text
    or lines on a light page."""
    from PIL import Image

    colors = Image.open(shot).convert("RGB").getcolors(1 << 24) or []
    assert len(colors) > 20, f"{shot}: {len(colors)} colours, a blank page?"


@needs_browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_fits_the_screen_and_draws_both_plots(page: Path, tmp_path: Path, width: int):
    m = _measure(page, tmp_path, width, REPORT_KEYS)
    _fits(m, width, "the report")
    assert len(m["svgs"]) == 2
    for left, right, w, h in m["svgs"]:
        assert 0 <= left and right <= m["viewport"] + 1 and w > 200 and h > 100, m
    _drawn(_screenshot(page, tmp_path, width, "report"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built as `.ci/run` builds it (strict); its home page."""
    if importlib.util.find_spec("mkdocs") is None and not NEEDED:
        pytest.skip("the docs extra: mkdocs-material")
    return build_docs_site(tmp_path_factory.mktemp("site")) / "index.html"


HOME_KEYS = [  # the getting-started page: what it is, install, first steps, the way on
    ("h1", "Getting started"),
    ("h2", "Install"),
    ("h2", "First steps"),
    ("article a", "Your first contract"),
    ("article code", "eagle-contract demo"),
]


@needs_browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_docs_home_page_fits_the_screen(site: Path, tmp_path: Path, width: int):
    m = _measure(site, tmp_path, width, HOME_KEYS)
    _fits(m, width, "the docs home page")
    _drawn(_screenshot(site, tmp_path, width, "docs-home"))


@needs_browser
def test_a_page_wider_than_the_screen_is_caught(tmp_path: Path) -> None:
    """The measure is not a formality: a page wider than a phone, or whose key is hidden,
    fails it, in the same browser."""
    page = tmp_path / "site" / "wide.html"
    page.parent.mkdir()
    page.write_text(
        "<!DOCTYPE html><html><body><h1>Title</h1><h2 style='visibility:hidden'>Gone</h2>"
        "<div style='width:900px'>a table too wide</div></body></html>"
    )
    m = _measure(page, tmp_path, 390, [("h1", "Title"), ("h2", "Gone")])
    assert m["page"] > m["viewport"] and m["wide"] == ["DIV."], m
    assert [seen for _, _, seen in m["keys"]] == [True, False], m
    with pytest.raises(AssertionError, match="scrolls sideways at 390 px"):
        _fits(m, 390, "a page")
    with pytest.raises(AssertionError, match="not on screen"):
        _fits({**m, "page": m["viewport"], "wide": []}, 390, "a page")


@needs_browser
def test_with_javascript_off_the_page_is_all_there(page: Path, tmp_path: Path):
    """The report holds no script; in Chromium with JavaScript off (the profile's content
    setting, proven off on a page whose script would change its text) every finding, hint
    and layout row is on the page, and both plots are drawn, their bounds band included."""
    from PIL import Image  # matplotlib's own dependency

    assert "<script" not in page.read_text()
    (tmp_path / "profile" / "Default").mkdir(parents=True)
    (tmp_path / "profile" / "Default" / "Preferences").write_text(
        json.dumps({"profile": {"default_content_setting_values": {"javascript": 2}}})
    )
    control = tmp_path / "control.html"
    control.write_text('<p id="a">static</p><script>a.textContent = "ran"</script>')
    assert '<p id="a">static</p>' in _chromium(tmp_path, "--dump-dom", control.as_uri()).stdout
    dom = _chromium(tmp_path, "--window-size=390,2000", "--dump-dom", page.as_uri()).stdout
    for text in (
        "FAILED",
        "EC401 norm-out-of-bounds",
        "EC501 layout-mismatch",
        "hint:",
        "embed (proven; declared residual:2)",
        "DIFFERS",
    ):
        assert text in dom, text
    assert dom.count("<svg") == 2
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, "--window-size=1280,3000", f"--screenshot={shot}", page.as_uri())
    colors = Image.open(shot).convert("RGB").getcolors(1 << 24) or []
    band = sum(n for n, c in colors if all(abs(a - b) <= 8 for a, b in zip(c, BAND)))
    assert band > 1000, f"{band} pixels of the bounds' band: the plots were not drawn"


BAND = (213, 236, 213)  # matplotlib's tab:green at alpha 0.2 on white (tests/cli/test_reports.py)
