"""Which systemd unit properties hold a cgroup's values, and what systemd then writes to the kernel (pure).

Mirrors opencontainers/cgroups `genV1ResourcesProperties` (systemd/v1.go) and `genV2ResourcesProperties`
(systemd/v2.go), which the kubelet's systemd cgroup manager calls for pod and QoS slices. Everything systemd
cannot express is named by `leftover_values` / `leftover_files`, for the caller to write as files (runc's
`fsMgr.Set` after `setUnitProperties`).

Why the driver must go through properties at all: systemd re-applies a unit's properties on every
`daemon-reload` and overwrites direct writes to the files it manages (research/qemu-cgroupv2-systemd.md).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from cgroupfs.convert import (
    DEFAULT_PERIOD_US,
    hugepage_size_name,
    shares_to_weight_linear,
    shares_to_weight_quadratic,
)
from cgroupfs.types import UNLIMITED, CgroupValues, CgroupVersion

UINT64_MAX: Final = 2**64 - 1
USEC_INFINITY: Final = UINT64_MAX
"""systemd's `USEC_INFINITY` (and `CGROUP_LIMIT_MAX`): "no limit" for a `t` property."""
USEC_PER_SEC: Final = 1_000_000
USEC_PER_MSEC: Final = 1_000
QUOTA_STEP_PER_SEC_US: Final = 10_000
"""systemd keeps `CPUQuota=` as a whole percent in drop-ins: 10 ms of CPU time per second."""
SYSTEMD_MAX_PERIOD_US: Final = USEC_PER_SEC
WEIGHT_FORMULAS: Final = ("linear", "quadratic")
V1_SOFT_LIMIT: Final = "memory.soft_limit_in_bytes"
"""layout.MEMORY_SOFT, repeated so that layout may import this module (a test pins the two together)."""

PropertyValue = int | bool | str | tuple[str, ...]


class Property(NamedTuple):
    """One `(sv)` entry of a `SetUnitProperties` / `StartTransientUnit` call."""

    name: str
    signature: str  # the D-Bus signature of the variant's value: "t", "b", "s", "as"
    value: PropertyValue


def _uint64(value: int) -> int:
    """runc's `uint64(int64)`: -1 (unlimited) becomes `UINT64_MAX`, which systemd reads as "infinity"."""
    if value == UNLIMITED:
        return UINT64_MAX
    if value < 0 or value > UINT64_MAX:
        raise ValueError(f"{value} is not a valid limit")
    return value


MAX_CFS_QUOTA_US: Final = (1 << 44) - 1
"""The kernel's largest CFS quota (`max_cfs_runtime`, MAX_BW = 2^44 - 1 µs); runc's `maxCPUQuota`."""


def _runc_quota(quota_us: int, period_us: int) -> tuple[int, int]:
    """runc's `addCPUQuota` on (quota, period): the `CPUQuotaPerSecUSec` it sends and the quota it keeps.

    opencontainers/cgroups systemd/common.go, in uint64 arithmetic:
    `cpuQuotaPerSecUSec = uint64(*quota*1000000) / period` and, if `cpuQuotaPerSecUSec%10000 != 0`,
    `cpuQuotaPerSecUSec = ((cpuQuotaPerSecUSec / 10000) + 1) * 10000` and
    `*quota = int64(cpuQuotaPerSecUSec) * int64(period) / 1000000` ("Update the requested quota along with
    the round-up in order to write the same value to cgroupfs"); otherwise the quota is kept as given.
    Period 0 is `defCPUQuotaPeriod` (100000). The newest upstream also turns a quota above the kernel's
    maximum, before or after rounding, into "unlimited" (systemd/systemd_test.go `TestAddCPUQuota`:
    "Max quota, round up above max", "Quota too large", "Max int64 quota" expect `math.MaxUint64` and -1).
    """
    if quota_us <= 0:
        return USEC_INFINITY, quota_us
    if quota_us > MAX_CFS_QUOTA_US:
        return USEC_INFINITY, UNLIMITED
    period = _period(period_us)
    per_sec = quota_us * USEC_PER_SEC // period
    if per_sec % QUOTA_STEP_PER_SEC_US == 0:
        return per_sec, quota_us
    per_sec = (per_sec // QUOTA_STEP_PER_SEC_US + 1) * QUOTA_STEP_PER_SEC_US
    quota = per_sec * period // USEC_PER_SEC
    if quota > MAX_CFS_QUOTA_US:
        return USEC_INFINITY, UNLIMITED
    return per_sec, quota


def cpu_quota_per_sec_usec(quota_us: int, period_us: int) -> int:
    """The `CPUQuotaPerSecUSec` runc sends: quota per CPU second, rounded UP to a multiple of 10 ms.

    The round-up exists because systemd stores `CPUQuota=` as a whole percentage in its drop-ins; an
    unrounded value would be truncated on the next daemon-reload. `USEC_INFINITY` for quota <= 0.
    """
    return _runc_quota(quota_us, period_us)[0]


def systemd_rounded_quota(quota_us: int, period_us: int) -> int:
    """The CFS quota (µs per period) runc's systemd driver ends up with for `quota_us` (see `_runc_quota`).

    e.g. 123456 per 100 ms -> 1240000 µs/s -> 124000; 500000 per 900 ms -> 560000 µs/s -> 504000; a quota
    that is already a whole percent is kept. Quota <= 0 (unlimited / unset) is returned unchanged, and one
    above the kernel's maximum becomes -1. A diff for the systemd driver compares against this value, never
    against the unrounded quota, or it would find a difference on every pass and never converge.
    """
    return _runc_quota(quota_us, period_us)[1]


def systemd_cpu_max(quota_us: int | None, period_us: int | None) -> tuple[int, int] | None:
    """The (quota, period) systemd itself writes to `cpu.max` / `cpu.cfs_*_us`; quota -1 = "max".

    systemd src/core/cgroup.c `cgroup_apply_unified_cpu_quota` / `cgroup_apply_legacy_cpu_quota`: an infinite
    quota always gets the default 100 ms period; otherwise the period (default 100 ms when
    `CPUQuotaPeriodUSec` was never set) is clamped by `cgroup_cpu_adjust_period` to
    `MIN(MAX3(period, 1ms, 1ms * USEC_PER_SEC / quota_per_sec), 1s)` and the quota written is
    `MAX(quota_per_sec * period / USEC_PER_SEC, 1ms)`. This is what the kernel holds after every
    `daemon-reload`; it equals `(systemd_rounded_quota(q, p), p)` for the kubelet's own values (quota >= 1 ms,
    period 100 ms) but not at the edges (a sub-1% quota, "max" with a non-default period).
    None when `unit_properties` sends no CPU quota property (nothing is changed).
    """
    quota = quota_us or 0
    period = period_us or 0
    if quota == 0 and period == 0:
        return None
    per_sec = cpu_quota_per_sec_usec(quota, period)
    if per_sec == USEC_INFINITY:
        return UNLIMITED, DEFAULT_PERIOD_US
    requested = period or DEFAULT_PERIOD_US
    adjusted = min(
        max(requested, USEC_PER_MSEC, USEC_PER_MSEC * USEC_PER_SEC // per_sec), SYSTEMD_MAX_PERIOD_US
    )
    return max(per_sec * adjusted // USEC_PER_SEC, USEC_PER_MSEC), adjusted


def _period(period_us: int) -> int:
    if period_us < 0:
        raise ValueError(f"invalid CFS period {period_us}")
    return period_us or DEFAULT_PERIOD_US


def _weight(shares: int, weight_formula: str) -> int:
    if weight_formula == "quadratic":
        return shares_to_weight_quadratic(shares)
    return shares_to_weight_linear(shares)


def _quota_properties(quota_us: int | None, period_us: int | None) -> list[Property]:
    """runc's `addCPUQuota`: the period if set, then the per-second quota if either is set.

    As in runc, 0 means unset, and a period without a quota sends "infinity" (the kubelet never does that).
    """
    quota = quota_us or 0
    period = period_us or 0
    out: list[Property] = []
    if period:
        out.append(Property("CPUQuotaPeriodUSec", "t", _period(period)))
    if quota or period:
        out.append(Property("CPUQuotaPerSecUSec", "t", cpu_quota_per_sec_usec(quota, period)))
    return out


def unit_properties(
    values: CgroupValues, version: CgroupVersion, weight_formula: str
) -> tuple[Property, ...]:
    """The unit properties that hold `values`, in runc's order; None fields are left alone.

    v2 (`genV2ResourcesProperties`): MemoryMax, MemoryLow, CPUWeight, CPUQuotaPeriodUSec, CPUQuotaPerSecUSec.
    v1 (`genV1ResourcesProperties`): MemoryLimit, CPUShares, CPUQuotaPeriodUSec, CPUQuotaPerSecUSec.
    runc's "0 = unset" is kept for the memory limit, shares and quota/period (a 0 limit would OOM-kill
    the slice). MemoryLow=0 is sent, as the kubelet's `Unified["memory.low"]` path does, so that a
    reservation can be lowered to nothing. `weight_formula` is how shares become `CPUWeight` on v2:
    "linear" (kubelet, pod and QoS cgroups) or "quadratic" (runc >= 1.3.2).
    """
    if weight_formula not in WEIGHT_FORMULAS:
        raise ValueError(f"unknown weight formula {weight_formula!r} (expected one of {WEIGHT_FORMULAS})")
    out: list[Property] = []
    if version is CgroupVersion.V2:
        if values.memory_limit:
            out.append(Property("MemoryMax", "t", _uint64(values.memory_limit)))
        if values.memory_reservation is not None:
            out.append(Property("MemoryLow", "t", _uint64(values.memory_reservation)))
        if values.cpu_shares:
            weight = _weight(values.cpu_shares, weight_formula)
            if weight:
                out.append(Property("CPUWeight", "t", weight))
    else:
        if values.memory_limit:
            out.append(Property("MemoryLimit", "t", _uint64(values.memory_limit)))
        if values.cpu_shares:
            out.append(Property("CPUShares", "t", _uint64(values.cpu_shares)))
    out.extend(_quota_properties(values.cpu_quota, values.cpu_period))
    return tuple(out)


def leftover_values(values: CgroupValues, version: CgroupVersion) -> CgroupValues:
    """The part of `values` no systemd property holds, to be written as files after the properties.

    hugetlb: systemd (252) neither enables nor manages the controller, so its files survive daemon-reload.
    v1 `memory.soft_limit_in_bytes`: runc's v1 driver has no property for `MemoryReservation` and leaves it
    to `fs.MemoryGroup.Set`. Render the result with `cgroupfs.layout.render` (driver systemd) to get the
    exact files, which also places hugetlb correctly on hybrid hosts.
    """
    reservation = values.memory_reservation if version is CgroupVersion.V1 else None
    return CgroupValues(memory_reservation=reservation, hugetlb=dict(values.hugetlb))


def leftover_files(values: CgroupValues, version: CgroupVersion) -> tuple[str, ...]:
    """The names of the files `leftover_values` occupies on a host of one cgroup version, in render order."""
    rest = leftover_values(values, version)
    suffix = "limit_in_bytes" if version is CgroupVersion.V1 else "max"
    names = [V1_SOFT_LIMIT] if rest.memory_reservation is not None else []
    names += [f"hugetlb.{hugepage_size_name(size)}.{suffix}" for size in sorted(rest.hugetlb)]
    return tuple(names)
