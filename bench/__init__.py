"""Benchmarks (not tests): run from the repository root, e.g. python -m bench.api_bench."""
