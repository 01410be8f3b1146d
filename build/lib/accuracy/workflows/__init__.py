"""What a user asks of one op or one output: explain, check, scan, selftest, on shared evaluation."""
