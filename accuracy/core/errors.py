"""User-facing problems: an error is one line and exit status 2; a warning is one line on stderr."""

import sys


class OpbenchError(Exception):
    """Bad input from the user (unknown op, corrupt file, ...), never a bug in opbench."""


def warn(line: str) -> None:
    """Say something the user should know without stopping: `opbench: warning: ...` on stderr,
    where it never mixes with a command's output (a table, JSON) on stdout."""
    from accuracy.core.formatting import printable  # labels and paths in it may hold control characters

    print(f"opbench: warning: {printable(line)}", file=sys.stderr)
