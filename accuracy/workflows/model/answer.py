"""The answer of `opbench model` a user reads in ten seconds, made once here for the terminal,
the page and the tests: per port three lines of at most LINE characters (is the port right,
where first not, why and the one command to look closer), each unit's short reason, and how
each outcome is shown. How each threshold is derived stays in the rows' `reason` (--json),
behind `--explain-verdicts` and a collapsed part of the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accuracy.core.formatting import format_number
from accuracy.judge.verdicts import (
    BEYOND,
    ERROR,
    NO_VERDICT,
    NOT_COMPARED,
    RUNTIME_LIMIT,
    SUSPICIOUS,
    UNDETERMINED,
    WITHIN,
    WITHIN_NOISE,
)
from accuracy.workflows.model.rows import InputRow, PortResult, UnitRow
from accuracy.workflows.model.unit import CauseFinding

Cause = CauseFinding | Mapping[str, Any] | None  # a row's cause, or its --json form
LINE = 160  # characters per answer line
INDENTED = LINE - 2  # the second and third lines, indented under the first
SHORT = 64  # characters of a row's short reason
FOLD = 40  # units per port the terminal shows in full without -v (above: the flagged ones, and the top level)
RERUN = "this command with --explain-verdicts"  # how each threshold was derived, on the same run


def worst_text(worst: dict) -> str:
    """The element that decided, as the answer lines print it."""
    if not worst:
        return "-"
    return (
        f"[{', '.join(map(str, worst['index']))}] {worst['result']:.9g} vs exact {worst['exact']:.9g} "
        f"({format_number(worst['error_ulp'])} ulp)"
    )


def cause_text(given: Cause) -> str:
    """The answer's cause: what explains the unit, or the nearest known cause and how far it remains."""
    cause = CauseFinding.of(given)
    if not cause:
        return ""
    if cause.words is None:
        return f"no known cause explains it (none in the catalogue applies to it); {positional(cause)}"
    if cause.explains:
        also = f" (also: {'; '.join(str(a.words) for a in cause.alternatives)})" if cause.alternatives else ""
        return f"explained by {cause.words}{also}; {positional(cause)}"
    ratio = cause.ratio
    # a ratio within the limit where the entry still does not explain (non-finite results, which
    # the ratio leaves out) is no distance to quote: "leaves it at 0x its tier's limit" read as within
    far = (
        f"leaves it at {ratio:.3g}x its tier's limit"
        if ratio is not None and ratio == ratio and ratio > 1
        else "does not bring it within rounding"
    )
    # the nearest entry is no cause: it is named as what was tried, never worded as what happened
    return (
        f"no known cause explains it: nothing in the catalogue does (the nearest entry tried, {cause.name}, {far}); "
        f"{positional(cause)}"
    )


def positional(cause: CauseFinding) -> str:
    """The shape of the error along the token sequence the cause search saw, where it saw one."""
    return f"{cause.positions['words']}; " if cause.positions else ""


@dataclass(frozen=True)
class Style:
    """How an outcome is shown: its colour (a name both renderers map), its mark where no colour
    is available, and whether a unit with it is flagged (counted, listed, drawn as one)."""

    colour: str
    mark: str
    flagged: bool


# One entry per outcome (tests/cli/test_model_answer.py checks every Verdict and Unjudged has one):
# a new outcome slots in here and every renderer follows.
STYLES: dict[str, Style] = {
    WITHIN: Style("green", "ok", flagged=False),
    SUSPICIOUS: Style("yellow", "??", flagged=True),
    BEYOND: Style("red", "!!", flagged=True),
    UNDETERMINED: Style("magenta", "~~", flagged=True),
    NOT_COMPARED: Style("grey", "--", flagged=False),
    RUNTIME_LIMIT: Style("blue", "rt", flagged=False),  # the runtime's known limit: listed apart, not flagged
    WITHIN_NOISE: Style("cyan", "qn", flagged=False),  # a quantized port's unit within the noise it declared
    ERROR: Style("red", "!!", flagged=True),
    NO_VERDICT: Style("grey", "--", flagged=False),
}


def is_flagged(verdict: str) -> bool:
    return STYLES[verdict].flagged


def clip(text: str, width: int = LINE) -> str:
    """`text` cut to `width` characters, "..." marking the cut."""
    return text if len(text) <= width else text[: max(width - 3, 0)].rstrip() + "..."


def _headline(text: str) -> str:
    """A reason's headline: its asides in parentheses dropped (not a call's: `1/sqrt(d)` stays), up
    to its first ': ' or '; '. Reasons are written headline first ("6.02x the typical threshold: typical
    tier, derived as ...")."""
    kept, depth = [], 0
    for i, c in enumerate(text):
        depth += c == "(" and (depth > 0 or i == 0 or text[i - 1] == " ")
        if depth == 0:
            kept.append(c)
        depth -= c == ")" and depth > 0
    plain = " ".join("".join(kept).split())
    for stop in (": ", "; "):
        plain = plain.split(stop, 1)[0]
    return plain.strip()


def ratio(row: UnitRow) -> float | None:
    """The unit's largest ratio to a threshold it is held to (typical tier, worst-case bound):
    how near it comes to being flagged; None where it is held to none (an exact lookup)."""
    ratios = [r for r in (row.typical_ratio, row.bound_ratio) if r is not None and r == r]
    return max(ratios, default=None)


def short_reason(row: UnitRow) -> str:
    """One short reason per row: the ratio alone for a unit within rounding that has one, else the
    reason's headline."""
    value = ratio(row)
    if row.verdict == WITHIN and value is not None:
        return f"{value:.3g}x"
    if row.verdict == WITHIN_NOISE and row.quantization is not None:
        return f"{row.quantization['ratio']:.3g}x noise"
    return clip(_headline(row.reason), SHORT)


def cause_words(given: Cause) -> str:
    """The answer's cause in plain words: what explains the unit, or that no known cause does."""
    cause = CauseFinding.of(given)
    tail = f"; {cause.positions['words']}" if cause and cause.positions else ""
    if not cause or not cause.explains:
        return "no known cause" + tail
    return f"explained by {cause.words}{tail}"


def look_closer(row: UnitRow, dtype: str) -> str:
    """The one command to look closer at a unit: the registry op it computes, on every
    implementation (`opbench explain`); for any other unit, this run's derivation of its threshold."""
    if row.registry_op:
        return f"opbench explain {row.registry_op} --dtype {dtype}"
    return RERUN


def number(v) -> str:
    """A number as the answers and the table print it: 3 significant digits, - where there is none."""
    return "-" if v is None or v != v else f"{v:.3g}"


@dataclass(frozen=True)
class PortAnswer:
    """One port's three lines, and the unit (or input) the second names, which the page links to its row."""

    port: str
    verdict: str
    where: str
    why: str
    unit: str | None = None

    def lines(self) -> list[str]:
        """As the terminal prints them: the second and third indented under the first."""
        return [self.verdict, f"  {self.where}", f"  {self.why}"]


def _first_input(port: PortResult) -> InputRow | None:
    return next((i for i in port.inputs or [] if i.verdict != WITHIN), None)


def _verdict_line(port: PortResult, label: str) -> str:
    out, end = port.output, port.end_to_end
    output = (
        f"its output {number(out['relative_error'])} from float64 "
        f"(PyTorch's own: {number(out['reference_relative_error'])})"
    )
    counts = f"{port.compared} of {port.compared + port.not_compared} units compared"
    if port.compared == 0:
        return f"{label}: nothing was compared ({counts}); {output}"
    if port.first_not_within is not None:
        limits = f" (+{port.runtime_limits} runtime limits)" if port.runtime_limits else ""
        return (
            f"{label}: NOT within rounding: {port.flagged} of {port.compared} units compared flagged{limits}; {output}"
        )
    noise = " or its quantization noise" if any(r.verdict == WITHIN_NOISE for r in port.layers) else ""
    if end.verdict == BEYOND:
        beyond = "its quantization noise" if noise else "rounding"
        return f"{label}: every compared layer within rounding{noise}, but end to end beyond {beyond}: {end.reason}"
    if _first_input(port) is not None:
        return f"{label}: every compared layer within rounding ({counts}), but its input is not the model's"
    if port.runtime_limits:
        return (
            f"{label}: no unit flagged; {port.runtime_limits} at its runtime's known limit, the others within "
            f"rounding ({counts}); {output}"
        )
    return f"{label}: every compared layer within rounding{noise} ({counts}), and {output}"


def port_answer(port: PortResult) -> PortAnswer:
    """The three lines of one port, from its result."""
    label = f"{port.port} [{port.dtype}]"
    verdict = clip(_verdict_line(port, label))
    rows = {r.path: r for r in port.layers}
    given = _first_input(port)
    first = rows.get(port.first_not_within or "")
    if given is not None:
        where = f"first not as the model's: its input {given.input} as {given.layer} received it: {given.verdict}"
        return PortAnswer(label, verdict, clip(where, INDENTED), _why(given.cause, RERUN), given.layer)
    if first is not None:
        own = ", in its own forward" if first.own_code else ""
        where = f"first not within rounding: {first.path} ({first.op}){own}: {first.verdict}, "
        where += short_reason(first)
        why = _why(first.cause, look_closer(first, port.dtype))
        return PortAnswer(label, verdict, clip(where, INDENTED), why, first.path)
    end = port.end_to_end
    if end.verdict == BEYOND and end.quantization is not None:
        departs, cause = end.first_departs, end.cause
        if cause is not None:  # the points whose clipping, counted apart at each unit, moves the output
            where = f"each unit within its quantization noise; the output's clipping at {departs or _value(cause)}"
            return PortAnswer(label, verdict, clip(where, INDENTED), _why(cause, RERUN), departs)
        where = f"most clipping counted apart at {departs}" if departs else "no unit clips"
        why = f"cause: not one unit: each is within its quantization noise, not its clipping; look closer: {RERUN}"
        return PortAnswer(label, verdict, clip(where, INDENTED), clip(why, INDENTED), departs)
    if end.verdict == BEYOND:
        departs = end.first_departs
        where = f"first departs from PyTorch's own at {departs}" if departs else "no unit departs from PyTorch's own"
        why = f"cause: not one unit: each is within rounding; look closer: {RERUN}"
        return PortAnswer(label, verdict, clip(where, INDENTED), clip(why, INDENTED), departs)
    limited = [r for r in port.layers if r.verdict == RUNTIME_LIMIT]
    if limited:
        paths = ", ".join(r.path for r in limited[:2]) + (f" and {len(limited) - 2} more" if len(limited) > 2 else "")
        where = f"runtime limit, not flagged: {paths}"
        why = f"cause: {limited[0].runtime_limit or 'its runtime'}; look closer: {RERUN}"
        return PortAnswer(label, verdict, clip(where, INDENTED), clip(why, INDENTED), limited[0].path)
    compared = [r for r in port.layers if r.verdict == WITHIN and ratio(r) is not None]
    nearest = max(compared, key=lambda r: ratio(r) or 0.0, default=None)
    where = (
        f"no unit flagged; the nearest, {nearest.path}, at {number(ratio(nearest))}x its threshold"
        if nearest
        else "no unit flagged"
    )
    return PortAnswer(
        label, verdict, clip(where, INDENTED), "nothing to look into; -v shows every unit, --explain-verdicts why"
    )


def _value(cause: Cause) -> str | None:
    found = CauseFinding.of(cause)
    return found.value if found else None


def _why(cause: Cause, command: str) -> str:
    """Line 3: the cause, shortened (its asides dropped, then cut) so that the command fits."""
    tail = f"; look closer: {command}"
    words = cause_words(cause)
    room = INDENTED - len("cause: ") - len(tail)
    if len(words) > room:
        words = clip(_headline(words), max(room, 16))
    return clip(f"cause: {words}{tail}", INDENTED)


def explanation(cause: Cause, reason: str) -> str:
    """A row's full reason (a unit's, an input's, a checked output's, an implementation's): its
    cause in words and how its threshold is derived (--explain-verdicts, the page, check, explain)."""
    return cause_text(cause) + reason
