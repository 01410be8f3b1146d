"""The docs' pages as tests read them: a page's text and the `sh` block after a marker in it."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def sh_block_after(page: str, marker: str) -> str:
    """The first ```sh block of docs/`page` after `marker`, without its fences (the lines a test
    runs in place of the docs test, where the block is marked not run)."""
    return (DOCS / page).read_text().split(marker, 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0]
