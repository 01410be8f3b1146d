"""Plain-text tables for the terminal: aligned columns, no dependencies."""

from __future__ import annotations


def printable(text: object) -> str:
    """`text` with every character the terminal would act on (newline, ESC of an ANSI sequence,
    a bidi override) written as its Python escape, so a user-supplied label or path can neither
    forge a table row nor drive the terminal; printable text, non-ASCII included, is unchanged."""
    s = str(text)
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def format_table(header: list[str], rows: list[list[str]]) -> list[str]:
    header, rows = [printable(c) for c in header], [[printable(c) for c in r] for r in rows]
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
