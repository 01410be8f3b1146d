"""Driving asv for `opbench run`: batches, the results store, progress, fingerprints, offline pages."""
