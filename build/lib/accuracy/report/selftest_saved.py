"""The self-test's summary for the report, from a saved `opbench selftest --json`.

The self-test judges every correct implementation and mutants of it (accuracy/workflows/selftest.py); at
small sizes it takes minutes, too long for every `make bench`, so the report shows a saved run:
`<results>/selftest.json` (`make selftest` writes it), else the copy kept in the repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "selftest.json"
KEPT = Path(__file__).resolve().parents[2] / "reports" / FILE_NAME


@dataclass
class SavedSelftest:
    path: Path
    summary: dict  # accuracy.workflows.selftest.summary's fields
    cases: list[dict]  # CaseReport.as_dict() per op, dtype and condition
    commit: str  # the opbench commit it ran at, where recorded

    def headline(self) -> str:
        s = self.summary
        return (
            f"{s['false_alarms']} false alarms in {s['correct_judgements']} judgements of correct implementations; "
            f"{s['caught']} of {s['must_catch']} must-catch mutants caught ({100 * s['catch_rate']:.1f}%); "
            f"{s['confirmed_alarms']} confirmed alarms (library findings); {s['cases']} op/dtype/condition cases"
        )


def find_selftest(results_dir: Path) -> SavedSelftest | None:
    """The results directory's own run, else the repository's copy; None if neither reads."""
    for path in (Path(results_dir) / FILE_NAME, KEPT):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return SavedSelftest(path, data["summary"], list(data["cases"]), str(data.get("commit", "")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
