"""Trend reports over asv results: load them into pandas, find steps, compare, render."""

from accuracy.report.environments import compare_across
from accuracy.report.load import LoadedResults, load_results
from accuracy.report.render import write_report
from accuracy.report.trends import find_steps

__all__ = ["LoadedResults", "compare_across", "find_steps", "load_results", "write_report"]
