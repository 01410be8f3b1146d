"""opbench's accuracy package: op registry, exact references, error metrics and the CLI."""

__version__ = "0.1.0"
