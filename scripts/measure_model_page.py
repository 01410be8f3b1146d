"""Measure `opbench model --html` pages (issue 58): per report, the page's size, the seconds to
write it, and in headless Chromium (a 1400x900 window) the time to first paint and to first
contentful paint, and the load event, as the page's own Performance API reports them, where the
answer block ends, and where the row the answer names is before and after a click on its name; with
--screenshots DIR, a PNG of its first screen (model-page-<report>.png).

    opbench model accuracy.workflows.model.zoo:decoder_24 --inputs x.npz --port onnxruntime --json > d.json
    python scripts/measure_model_page.py d.json [more.json ...] [--screenshots docs]

The reports are --json outputs: the page is written from them as `opbench model --html` writes it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from accuracy.report.model_page import model_page
from accuracy.workflows.model.report import ModelReport

PROBE = """<script>window.addEventListener("load", () => setTimeout(() => {
  const paint = Object.fromEntries(performance.getEntriesByType("paint").map(e => [e.name, e.startTime]));
  const nav = performance.getEntriesByType("navigation")[0];
  const answer = document.querySelector("#answer .answer").getBoundingClientRect().bottom;
  const link = document.querySelector("#answer a");
  let before = null;
  if (link) {
    before = document.getElementById(decodeURIComponent(link.hash.slice(1))).getBoundingClientRect().top;
    link.click();
  }
  setTimeout(() => {
    const row = link && document.getElementById(decodeURIComponent(link.hash.slice(1))).getBoundingClientRect();
    const out = document.createElement("output");
    out.id = "probe";
    out.textContent = JSON.stringify({first_paint_ms: paint["first-paint"],
      first_contentful_paint_ms: paint["first-contentful-paint"], load_ms: nav.loadEventStart,
      viewport: innerHeight, answer_bottom_px: answer, row_top_before_click_px: before,
      row_after_click_px: row && [row.top, row.bottom]});
    document.body.append(out);
  }, 50);
}, 100));</script>"""


def chromium(profile: Path, *args: str) -> str:
    command = [
        shutil.which("chromium") or "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout


def report_of(path: Path) -> ModelReport:
    return ModelReport.from_json(json.loads(path.read_text()))


def measure(path: Path, folder: Path, screenshots: Path | None) -> dict:
    report = report_of(path)
    start = time.perf_counter()
    page = model_page(report)
    written = time.perf_counter() - start
    html = folder / f"{path.stem}.html"
    html.write_text(page)
    probed = folder / f"{path.stem}_probed.html"
    probed.write_text(page + PROBE)
    dom = chromium(folder / f"profile-{path.stem}", "--virtual-time-budget=3000", "--dump-dom", probed.as_uri())
    timings = json.loads(dom.split('<output id="probe">')[1].split("</output>")[0])
    units = sum(len(p.layers) for p in report.ports)
    if screenshots:
        chromium(folder / "profile", f"--screenshot={screenshots / f'model-page-{path.stem}.png'}", html.as_uri())
    return {"report": path.name, "units": units, "kib": round(len(page.encode()) / 1024, 1),
            "write_s": round(written, 2), **timings}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--screenshots", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.reports:
            print(json.dumps(measure(path, Path(tmp), args.screenshots)), flush=True)


if __name__ == "__main__":
    main()
