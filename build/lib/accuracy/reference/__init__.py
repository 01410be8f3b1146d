"""Exact values: double-double arithmetic, correctly rounded references, their cache, seeded inputs, mpmath oracles."""
