"""index.html as a real browser sees it: title, tables, and images that actually decode."""

import numpy as np
import pytest
from chromium import chromium, needs_chromium
from fixtures_report import INJECTED
from matplotlib.image import imread

from accuracy.report import write_report

pytestmark = needs_chromium

# Appended to a copy of the page (the report itself has no scripts): after load, record each
# image's decoded width in the DOM, where --dump-dom can see it.
PROBE = """<script>window.addEventListener("load", () => {
  const widths = [...document.images].map(img => img.complete ? img.naturalWidth : -1);
  const out = document.createElement("output");
  out.id = "probe";
  out.textContent = widths.join(",");
  document.body.append(out);
});</script>"""


@pytest.fixture(scope="module")
def report_page(shared_results, tmp_path_factory):
    return write_report(shared_results, tmp_path_factory.mktemp("out"), "browser")


@pytest.mark.slow  # end to end: Chromium
def test_page_title_tables_and_decoded_images(report_page, tmp_path):
    probed = tmp_path / "probed.html"
    probed.write_text(report_page.read_text().replace("</body>", PROBE + "</body>"))
    dom = chromium(tmp_path / "profile", "--dump-dom", probed.as_uri())
    assert "<title>opbench report: browser</title>" in dom
    assert dom.count("<table") >= 3
    timing_steps = sum(name.endswith("time_linear") for name, *_ in INJECTED)  # each also drops GFLOP/s
    assert dom.count('class="regression"') == len(INJECTED) + timing_steps
    widths = [int(w) for w in dom.split('<output id="probe">')[1].split("</output>")[0].split(",")]
    assert len(widths) == report_page.read_text().count("<img") and len(widths) >= 3
    assert all(w > 100 for w in widths)


@pytest.mark.slow
def test_screenshot_is_not_blank(report_page, tmp_path):
    shot = tmp_path / "page.png"
    chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400", report_page.as_uri())
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    assert pixels.std() > 0.05  # text, tables and plots, not a uniform page
    rgb = np.rint(pixels * 255).astype(np.uint32)  # PNG's 8-bit channels, one number per colour
    colours = np.bincount((rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2]).ravel())
    assert np.count_nonzero(colours) > 50  # (np.unique over rows took 7 CPU-s for 3 million pixels)
