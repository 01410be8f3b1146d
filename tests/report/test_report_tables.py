"""The page's section tables pinned to their HTML text: each section declares its columns once
(accuracy/report/html_page.py's Column) and one helper builds the <table>, so these goldens catch
a heading out of step with its cells, an environment column shown or hidden wrongly, a lost
right-alignment or a changed fold."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures_answers import COMMITS, DATES, FINGERPRINT, MACHINE, _measure, benchmarks, write_suite_results

from accuracy.report.html_page import SHOWN_ROWS, Column, _table
from accuracy.report.render import write_report
from accuracy.report.synthetic import write_result_file

pytestmark = pytest.mark.xdist_group("report-tables")  # the two pages, drawn once, not on each worker

WITHIN = '<td><span class="within">within rounding</span></td>'
LINEAR, VAR = '<td><a href="#op-linear">linear</a></td>', '<td><a href="#op-var">var</a></td>'
NUMPY_FORMULA, TORCH_VAR = "<td><code>numpy:x @ W.T + b</code></td>", "<td><code>torch:torch.var(x)</code></td>"
THREADS, RUNS = "<td>thread count (1 vs all cores)</td>", "<td>run to run (same threads)</td>"
REPRODUCIBILITY_LEAD = (
    "<p>Cases whose output bits differ between one thread and all cores, or between repeated runs with the same "
    "threads. Every other case measured is bitwise reproducible.</p>"
)
# the three cases of fixtures_answers that change bits, in one environment
REPRODUCIBLE_ROWS = [
    f"{LINEAR}{NUMPY_FORMULA}<td>float32</td><td>random</td><td>512</td>{THREADS}{WITHIN}",
    f"{LINEAR}{NUMPY_FORMULA}<td>float32</td><td>random</td><td>2048</td>{THREADS}{WITHIN}",
    f"{VAR}{TORCH_VAR}<td>float32</td><td>random</td><td>1024</td>{RUNS}{WITHIN}",
]
REPRODUCIBILITY_HEAD = (
    "<th>op</th><th>implementation</th><th>dtype</th><th>condition</th><th>size</th><th>bits change with</th>"
    "<th>verdict</th>"
)
SIGMOID_REASON = (
    "max error 5.8e+04x the worst-case rounding bound (5.8e+08 ulp); known finding: MLAS keeps absolute, not "
    "relative, accuracy: 1.4% relative error at x = -11.6"
)

VAR_REASON = "computes something else by design (ddof=0); max error 16x the worst-case rounding bound (1.6e+05 ulp)"


def _section(page: str, key: str) -> str:
    """A section's content as the page has it: after its heading, up to the next section's."""
    return page.split(f'<h2 id="{key}">', 1)[1].split("</h2>\n", 1)[1].split('\n<h2 id="', 1)[0]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> tuple[str, str]:
    """The suite fixture's page with its one environment, and with a second (py3.12, the same
    measurements) at the newest commit beside it."""
    root = tmp_path_factory.mktemp("tables")
    write_suite_results(root / "one")
    write_suite_results(root / "two")
    measure = _measure(1, np.random.default_rng(7))
    write_result_file(root / "two", MACHINE, "py3.12", COMMITS[1], DATES[1], benchmarks(), measure, FINGERPRINT)
    one, two = (write_report(root / name, root / "reports", name, max_plots=0).read_text() for name in ("one", "two"))
    return one, two


def test_one_environment_has_no_environment_column(pages):
    one, _ = pages
    assert _section(one, "reproducibility") == (
        f"{REPRODUCIBILITY_LEAD}<table><thead><tr>{REPRODUCIBILITY_HEAD}</tr></thead><tbody>"
        + "".join(f"<tr>{row}</tr>" for row in REPRODUCIBLE_ROWS)
        + "</tbody></table>"
    )
    assert "<th>environment</th>" not in _section(one, "verdicts") + _section(one, "speed")


def test_two_environments_name_each_row_in_full(pages):
    """Reproducibility writes an environment's whole name in its column, each environment's rows together."""
    _, two = pages
    assert _section(two, "reproducibility") == (
        f"{REPRODUCIBILITY_LEAD}<table><thead><tr><th>environment</th>{REPRODUCIBILITY_HEAD}</tr></thead><tbody>"
        + "".join(f"<tr><td>{env} on box</td>{row}</tr>" for env in ("py3.11", "py3.12") for row in REPRODUCIBLE_ROWS)
        + "</tbody></table>"
    )


def test_two_environments_get_short_labels_and_a_legend_in_verdicts(pages):
    _, two = pages
    sigmoid = (
        '<td><a href="#op-sigmoid">sigmoid</a></td><td><code>onnxruntime:Sigmoid</code></td><td>float32</td>'
        f'<td>random</td><td><span class="beyond">beyond rounding</span></td><td>{SIGMOID_REASON}</td>'
        "<td>65536</td><td>1, 2</td>"
    )
    var = (
        f"{VAR}<td><code>numpy:np.var(x)</code></td><td>float32</td><td>random</td>"
        f'<td><span class="beyond">beyond rounding (semantics: ddof=0)</span></td><td>{VAR_REASON}</td>'
        "<td>1024</td><td>1, 2</td>"
    )
    assert _section(two, "verdicts") == (
        "<p>4 of 8 implementation/dtype/condition combinations are not <em>within rounding</em> somewhere (the "
        "worst case is shown).</p><p class=note>Environments: <b>E1</b> = <code>py3.11 on box</code>; <b>E2</b> = "
        "<code>py3.12 on box</code></p><table><thead><tr><th>environment</th><th>op</th><th>implementation</th>"
        "<th>dtype</th><th>condition</th><th>verdict</th><th>reason</th><th>sizes</th><th>threads</th></tr></thead>"
        f"<tbody><tr><td>E1</td>{sigmoid}</tr><tr><td>E2</td>{sigmoid}</tr><tr><td>E1</td>{var}</tr>"
        f"<tr><td>E2</td>{var}</tr></tbody></table>"
    )


def test_speed_right_aligns_its_numbers_only(pages):
    one, _ = pages
    speed = _section(one, "speed")
    assert (
        "<table><thead><tr><th>op</th><th>dtype</th><th>threads</th><th>size</th><th>fastest</th><th>seconds</th>"
        "<th>GFLOP/s</th><th>% of measured peak</th><th>% of theoretical peak</th><th>next fastest</th>"
        "<th>x slower</th></tr></thead><tbody><tr>"
        '<td><a href="#op-linear">linear</a></td><td>float32</td><td class="num">1</td><td class="num">2048</td>'
        '<td><code>torch:F.linear</code></td><td class="num">0.00471</td><td class="num">14.2</td>'
        '<td class="num">100</td><td class="num">22.3</td><td><code>torch:x @ W.T + b</code></td>'
        '<td class="num">1.03</td></tr>'
    ) in speed
    assert speed.count("<tr><td><a href=") == 6  # linear, sigmoid and var at 1 and 2 threads


def test_a_long_table_folds_its_rows_past_the_first_twelve():
    columns = [Column("n", str, numeric=True), Column("square", lambda n: f"{n * n}")]
    folded = _table(columns, range(SHOWN_ROWS + 4))
    head = "<table><thead><tr><th>n</th><th>square</th></tr></thead><tbody>"
    assert folded == (
        head
        + "".join(f'<tr><td class="num">{n}</td><td>{n * n}</td></tr>' for n in range(12))
        + "</tbody></table><details><summary>4 more rows</summary>"
        + head
        + '<tr><td class="num">12</td><td>144</td></tr><tr><td class="num">13</td><td>169</td></tr>'
        '<tr><td class="num">14</td><td>196</td></tr><tr><td class="num">15</td><td>225</td></tr>'
        "</tbody></table></details>"
    )
    assert _table(columns, range(SHOWN_ROWS + 3)).count("<tr>") == 16  # up to three past twelve stay in view
    assert _table(columns, []) == "<p>None.</p>"
