"""Properties of runc's systemd quota rounding that keep a diff for the systemd driver from flapping."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from cgroupfs.systemd.properties import (
    MAX_CFS_QUOTA_US,
    QUOTA_STEP_PER_SEC_US,
    cpu_quota_per_sec_usec,
    systemd_cpu_max,
    systemd_rounded_quota,
)
from cgroupfs.types import UNLIMITED

# the kernel accepts CFS periods of 1 ms .. 1 s; quotas here stay far enough below its maximum that
# rounding never turns them into "unlimited"
periods = st.integers(min_value=1000, max_value=1_000_000)
whole_periods = st.integers(min_value=10, max_value=10_000).map(lambda k: k * 100)
quotas = st.integers(min_value=1, max_value=10**12)
any_quota = st.integers(min_value=1, max_value=2**63 - 1)


def _as_limit(quota: int) -> float:
    return math.inf if quota == UNLIMITED else quota


@given(quotas, periods)
def test_never_below_the_requested_quota(quota: int, period: int) -> None:
    assert systemd_rounded_quota(quota, period) >= quota


@given(quotas, periods)
def test_at_most_one_step_above(quota: int, period: int) -> None:
    """Rounded UP to the next whole percent of a CPU second, not further."""
    assert systemd_rounded_quota(quota, period) - quota <= period // 100 + 1


@given(any_quota, any_quota, periods)
def test_monotone(a: int, b: int, period: int) -> None:
    low, high = min(a, b), max(a, b)
    assert _as_limit(systemd_rounded_quota(low, period)) <= _as_limit(systemd_rounded_quota(high, period))


@given(any_quota, periods)
def test_idempotent(quota: int, period: int) -> None:
    once = systemd_rounded_quota(quota, period)
    assert systemd_rounded_quota(once, period) == once


@given(quotas, periods)
def test_per_second_value_is_a_whole_percent_and_stable(quota: int, period: int) -> None:
    per_sec = cpu_quota_per_sec_usec(quota, period)
    assert per_sec % QUOTA_STEP_PER_SEC_US == 0
    # what the rounded quota would send is what was sent: re-applying it changes no property
    assert cpu_quota_per_sec_usec(systemd_rounded_quota(quota, period), period) == per_sec


@given(quotas, whole_periods)
def test_multiple_of_one_percent_of_the_period(quota: int, period: int) -> None:
    assert systemd_rounded_quota(quota, period) % (period // 100) == 0


@given(st.integers(min_value=MAX_CFS_QUOTA_US + 1, max_value=2**63 - 1), periods)
def test_above_the_kernel_maximum_is_unlimited(quota: int, period: int) -> None:
    assert systemd_rounded_quota(quota, period) == UNLIMITED


@given(st.integers(min_value=1000, max_value=10**10), whole_periods)
def test_systemd_writes_what_runc_rounds_for_kubelet_values(quota: int, period: int) -> None:
    """For the kubelet's values (quota >= 1 ms, period a whole number of 100 µs) systemd's own write on
    daemon-reload equals runc's rounded quota, so either can serve as the diff's desired value."""
    assert systemd_cpu_max(quota, period) == (systemd_rounded_quota(quota, period), period)
