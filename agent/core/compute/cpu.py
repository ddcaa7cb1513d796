"""CPU unit conversions, exactly the kubelet's (pkg/kubelet/cm/helpers_linux.go)."""

from __future__ import annotations

import math
from typing import Final

MIN_SHARES: Final = 2
MAX_SHARES: Final = 262144
SHARES_PER_CPU: Final = 1024
MILLI_CPU_TO_CPU: Final = 1000
QUOTA_PERIOD_US: Final = 100_000
MIN_QUOTA_PERIOD_US: Final = 1000
MIN_MILLI_CPU_LIMIT: Final = 10  # MinQuotaPeriod * MilliCPUToCPU / QuotaPeriod


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """`cpu.shares` for a CPU request; 0 means "no request" and maps to the kernel minimum."""
    if milli_cpu == 0:
        return MIN_SHARES
    shares = milli_cpu * SHARES_PER_CPU // MILLI_CPU_TO_CPU
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def milli_cpu_to_quota(milli_cpu: int, period_us: int) -> int:
    """CFS quota (µs) for a CPU limit over `period_us`; 0 means "not set". Never below 1 ms."""
    if milli_cpu == 0:
        return 0
    quota = milli_cpu * period_us // MILLI_CPU_TO_CPU
    return max(quota, MIN_QUOTA_PERIOD_US)


def shares_to_milli_cpu(shares: int) -> int:
    """The kubelet's reverse conversion, used for status: ceil(shares*1000/1024), 0 below the minimum."""
    if shares < MIN_SHARES:
        return 0
    return math.ceil(shares * MILLI_CPU_TO_CPU / SHARES_PER_CPU)


def quota_to_milli_cpu(quota_us: int, period_us: int) -> int:
    """The kubelet's reverse conversion: quota*1000/period; unlimited (-1) is 0."""
    if quota_us == -1 or period_us <= 0:
        return 0
    return quota_us * MILLI_CPU_TO_CPU // period_us
