"""The HTML report as people see it, in a real headless Chromium (Debian's `chromium`;
`.ci/run` installs it): at 1280 px and at a phone's 390 px the page never scrolls sideways,
both plots are drawn inside the viewport, and with JavaScript off every finding, hint and
layout row is on the page (the report has no script at all). The measurements come from a
copy of the page with a measuring script appended, read back with `--dump-dom`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_eagle_contract.reports import plots
from pytest_eagle_contract.shells import demo
from pytest_eagle_contract.shells.cli import main

CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
NEEDED = os.environ.get("EAGLE_CONTRACT_NEED_BROWSER") == "1"  # .ci/run sets it: no skip
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
const wide = [...document.querySelectorAll('body *')].filter(e => {
  const r = e.getBoundingClientRect();
  let p = e.parentElement, scrolls = false;
  for (; p; p = p.parentElement) if (getComputedStyle(p).overflowX === 'auto') scrolls = true;
  return r.right > W + 1 && !scrolls;
}).map(e => e.tagName + '.' + e.className);
parent.postMessage(JSON.stringify({viewport: W, page: document.documentElement.scrollWidth,
                                   svgs, wide: wide.slice(0, 10)}), '*');
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
    more = ["--target-model", str(root / "target"), "--reference-capture", "--report", str(report)]
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


@needs_browser
@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_fits_the_screen_and_draws_both_plots(page: Path, tmp_path: Path, width: int):
    (tmp_path / "measured.html").write_text(
        page.read_text().replace("</body>", MEASURE + "</body>")
    )
    host = tmp_path / "host.html"
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
    m = json.loads(found.group(1).replace("&quot;", '"'))
    assert width - 20 <= m["viewport"] <= width, m  # the frame's own scrollbar aside
    assert m["page"] <= m["viewport"], f"the page scrolls sideways at {width} px: {m}"
    assert m["wide"] == [], f"wider than the viewport at {width} px: {m['wide']}"
    assert len(m["svgs"]) == 2
    for left, right, w, h in m["svgs"]:
        assert 0 <= left and right <= m["viewport"] + 1 and w > 200 and h > 100, m


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
