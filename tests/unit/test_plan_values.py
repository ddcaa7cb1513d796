"""agent.core.plan.values: limits read back from the kernel's text forms, v1 and v2, the same way the ordering
and the invariant replay read them (a table; each expected value read off the kernel's documented form)."""

from __future__ import annotations

import math

import pytest

from agent.core.plan.values import _cpu_limit_of, _memory_limit_of

INF = math.inf


@pytest.mark.parametrize(
    ("texts", "cores"),
    [
        ({"cpu.max": "50000 100000"}, 0.5),  # v2: quota period
        ({"cpu.max": "max 100000"}, INF),  # v2 unlimited
        ({"cpu.max": None}, INF),  # v2 file absent
        ({"cpu.max": "garbage"}, INF),  # unreadable: the kernel's default, unlimited
        ({"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000"}, 1.5),  # v1
        ({"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}, INF),  # v1 unlimited
        ({"cpu.cfs_quota_us": "20000", "cpu.cfs_period_us": "50000"}, 0.4),  # a 50 ms period
        ({"cpu.cfs_quota_us": "30000"}, 0.3),  # period unknown: the kernel's 100 ms
        ({}, INF),
    ],
)
def test_cpu_limit(texts: dict[str, str | None], cores: float) -> None:
    assert _cpu_limit_of(texts) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("texts", "limit"),
    [
        ({"memory.limit_in_bytes": "134217728"}, 134217728.0),
        ({"memory.limit_in_bytes": "9223372036854771712"}, INF),  # v1 reads unlimited back as this
        ({"memory.limit_in_bytes": "-1"}, INF),
        ({"memory.max": "max"}, INF),
        ({"memory.max": "268435456"}, 268435456.0),
        ({"memory.max": None}, INF),
        ({}, INF),
    ],
)
def test_memory_limit(texts: dict[str, str | None], limit: float) -> None:
    assert _memory_limit_of(texts) == limit
