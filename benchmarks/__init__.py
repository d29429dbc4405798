"""Benchmarks of the mha_core forward, the notebooks and the dashboard (``make bench``)."""
