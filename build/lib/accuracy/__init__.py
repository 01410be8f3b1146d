"""opbench's accuracy package: op registry, exact references, error metrics and the CLI."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`accuracy.check` without importing the registry, numpy and torch on `import accuracy`."""
    if name == "check":
        from accuracy.workflows.check import check

        return check
    raise AttributeError(f"module 'accuracy' has no attribute {name!r}")
