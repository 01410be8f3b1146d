"""Numbers and plain-text tables for the terminal (and the report's cells): one spelling of a
number everywhere, aligned columns, no dependencies."""

from __future__ import annotations

MISSING = "-"


def is_missing(value: object) -> bool:
    """None, NaN and pandas' NA: a value that does not apply or was not measured."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except TypeError:  # pandas.NA compares to NA, which has no truth value
        return True


def format_number(value: object, digits: int = 3, missing: str = MISSING) -> str:
    """`digits` significant digits; a whole number (a size, a count) in full, not 6.55e+04; a
    missing value as `missing`."""
    if is_missing(value):
        return missing
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.{digits}g}"


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
