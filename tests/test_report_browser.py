"""report.html as people read it: rendered by a real browser (headless Chromium) in a 1,400 px window."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rqsweep import job
from tests.test_dask import handbook_job

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine: Debian's `chromium` renders "
                                "report.html (.ci/run installs it when apt can)")

# Appended to a copy of the page: once everything has loaded, what a reader would see, as JSON.
PROBE = """<pre id="rqsweep-probe"></pre><script>
window.addEventListener("load", () => {
  const images = [...document.images];
  const decision = [...document.querySelectorAll("h2")].find(h => h.textContent.startsWith("Best feasible setting"));
  let cost = decision;
  while (cost && cost.tagName !== "TABLE" && !cost.querySelector("table")) cost = cost.nextElementSibling;
  document.getElementById("rqsweep-probe").textContent = JSON.stringify({
    images: images.length, loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    page_width: document.documentElement.scrollWidth, window_width: window.innerWidth, window_height: window.innerHeight,
    decision_cost_bottom: cost ? cost.getBoundingClientRect().bottom : null,
    wider_than_window: [...document.querySelectorAll("body *")].filter(
      e => e.getBoundingClientRect().right > window.innerWidth + 0.5).map(e => e.tagName).slice(0, 10)});
});
</script>"""


def rendered(page: Path, folder: Path) -> dict:
    probe = folder / f"probed-{page.name}"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--window-size=1400,900", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'<pre id="rqsweep-probe">([^<]*)</pre>', dom)
    assert found and found.group(1), f"the page's probe did not run: {dom[:300]!r}"
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    return job.run(handbook_job(folder, 1), quiet=True).run_dir / "report.html"


def test_the_report_reads_at_1400_px(report, tmp_path):
    seen = rendered(report, tmp_path)
    assert seen["images"] >= 2 and seen["loaded"] == seen["images"]  # every plot loads
    assert seen["page_width"] <= seen["window_width"] and seen["wider_than_window"] == []
    # The decision and its cost per slice are on the first screen.
    assert seen["decision_cost_bottom"] is not None and seen["decision_cost_bottom"] <= seen["window_height"]


def test_the_probe_sees_a_broken_image_and_a_page_too_wide(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<html><body><h2>Best feasible setting beside the baseline</h2><p>no table</p>'
                    '<img src="missing.png"><div style="width: 2400px">wide</div></body></html>')
    seen = rendered(page, tmp_path)
    assert seen["images"] == 1 and seen["loaded"] == 0
    assert seen["page_width"] > seen["window_width"] and "DIV" in seen["wider_than_window"]
    assert seen["decision_cost_bottom"] is None
