"""Is an error rounding? Error metrics and their table, the precision model, typical tier, contracts, backward error,
verdicts."""
