"""The lowest layer: user errors, float formats, thread pools, limits, output formatting, plugins."""
