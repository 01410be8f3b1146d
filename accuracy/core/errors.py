"""User-facing errors: the CLI prints them as one line and exits with status 2."""


class OpbenchError(Exception):
    """Bad input from the user (unknown op, corrupt file, ...), never a bug in opbench."""
