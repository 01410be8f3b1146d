"""docs/findings.md is the registry's declarations, rendered: the committed page must be what
`python -m accuracy.catalog.findings_page` writes now, so a new finding cannot miss the docs."""

from __future__ import annotations

from dataclasses import replace

from accuracy.catalog import findings_page, registry
from accuracy.catalog.registry import get_op


def test_the_committed_page_is_the_generated_one():
    assert findings_page.PAGE.read_text(encoding="utf-8") == findings_page.render()


def test_every_declared_finding_semantics_and_unstable_formula_is_on_the_page():
    page = findings_page.render()
    declared = [
        impl for op in registry.all_ops() for impl in op.impls if impl.finding or impl.semantics or not impl.stable
    ]
    assert len(declared) >= 20
    assert all(f"`{impl.name}`" in page for impl in declared)
    assert "`torch:F.linear`" not in page  # nothing is declared about it


def test_a_new_finding_changes_the_page_and_check_says_it_is_stale(monkeypatch, tmp_path, capsys):
    page = tmp_path / "findings.md"
    monkeypatch.setattr(findings_page, "PAGE", page)
    assert findings_page.main([]) == 0 and findings_page.main(["--check"]) == 0
    linear = get_op("linear")
    found = replace(linear.impls[0], finding="off by 3 ulp in a made-up test")
    catalog = {**registry._catalog(), "linear": replace(linear, impls=(found, *linear.impls[1:]))}
    monkeypatch.setattr(findings_page, "all_ops", lambda: list(catalog.values()))
    assert "| linear | `torch:F.linear` | float16, bfloat16, float32, float64 | off by 3 ulp in a made-up test |" in (
        findings_page.render()
    )
    assert findings_page.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
