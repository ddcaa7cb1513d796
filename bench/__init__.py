"""Benchmarks: `make bench` (python -m bench) writes bench/results/*.json and regenerates BENCHMARKS.md."""
