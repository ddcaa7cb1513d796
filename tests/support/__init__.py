"""Fakes shared by the tests and the benchmarks: the fake CRI runtime, the fake API server, strict fake
cgroup trees, private kernel cgroup roots, and the StatefulSet world of the rollout.

A plain package, not a conftest: `python -m bench` and `python -m tests.reliability` import it without
the test runner, so nothing here imports pytest or hypothesis, nor any other part of tests/ (which may).
`tests/unit/test_bench_runs_without_pytest.py` holds that boundary.
"""
