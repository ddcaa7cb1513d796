"""Where systemd keeps a value at a coarser grain than the cgroup file, and what each writer leaves there (pure).

Under the systemd driver every writer — the kubelet for pod and QoS slices, the runtime's runc for container
scopes, the agent for what it owns — first sets the unit's properties (systemd writes its own value to the
file at once), then writes the file itself (opencontainers/cgroups `UnifiedManager.Set` / `LegacyManager.Set`:
`setUnitProperties`, then `fsMgr.Set`). systemd writes its value again whenever it re-applies the unit: a
`daemon-reload`, or another property change of the unit or of its siblings.

Of the values the kubelet sets, only the CFS quota has two forms. systemd keeps `CPUQuota=` in whole percents
of a CPU (10 ms per CPU second) in the unit's file, so runc's driver sends `CPUQuotaPerSecUSec` rounded UP to
the next 10 ms (`properties.cpu_quota_per_sec_usec`), and systemd writes that rounded quota to `cpu.max`. Then:

- an EXACT writer overwrites the file with the quota it was asked for (runc < 1.3.2: 1.1.5
  libcontainer/cgroups/systemd/common.go:480-511 `addCpuQuota` rounds only its local copy, v2.go:436-449
  `Set` then calls `fsMgr.Set(r)` with the unrounded `r.CpuQuota`; a kubelet < 1.34, which vendors runc's
  libcontainer (<= 1.32) or opencontainers/cgroups v0.0.1 (1.33)). The file holds the exact quota until
  systemd's next re-apply, and systemd's rounded one from then on;
- a ROUNDED writer writes the rounded quota to the file as well (opencontainers/cgroups 83f2519, in v0.0.2:
  systemd/common.go:300-333 `addCPUQuota` takes `*quota` and sets it to `cpuQuotaPerSecUSec * period /
  1000000`; systemd/v2.go:500-516 `Set` passes the updated copy to `fsMgr.Set`): runc >= 1.3.2 (v0.0.4),
  a kubelet >= 1.34 (v0.0.3; 1.36 vendors v0.0.6). File and re-apply agree from the start.

So a file may hold either value for one desired quota, and which one depends on the writer's version and on
the unit's history since: `cpu_max_forms` names both. Everything else the kubelet and runc set through
systemd is kept at the file's own grain (`reapplied_files`: `CPUWeight` and `CPUShares` are integers
written as they are, `MemoryMax`/`MemoryLow`/`MemoryLimit` bytes written as they are and rounded to whole
pages by the kernel for writer and systemd alike, `CPUQuotaPeriodUSec` microseconds, clamped by systemd only
where the kernel refuses the writer's value anyway). One more edge, outside what the agent supports: systemd
< 242 has no `CPUQuotaPeriodUSec`, so runc writes a period other than 100 ms to the file only (common.go
`addCPUQuota`: "setting will still be applied to cgroupfs") and systemd's re-apply puts 100 ms back.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from typing import Final

from cgroupfs.convert import DEFAULT_PERIOD_US, render_cpu_max
from cgroupfs.systemd.properties import (
    QUOTA_STEP_PER_SEC_US,
    UINT64_MAX,
    USEC_INFINITY,
    Property,
    systemd_cpu_max,
    systemd_rounded_quota,
)
from cgroupfs.types import UNLIMITED, CgroupVersion


class QuotaWrite(enum.StrEnum):
    """How a writer through the systemd driver leaves a CFS quota in the cgroup file."""

    EXACT = "exact"  # the quota asked for; systemd's rounded one after its next re-apply
    ROUNDED = "rounded"  # the rounded quota systemd keeps, in the property and the file alike


RUNC_ROUNDED_SINCE: Final = (1, 3, 2)
"""runc 1.3.2 vendors opencontainers/cgroups v0.0.4 (1.3.0 and 1.3.1: v0.0.1, before the fix; 1.2.x and
older: its own libcontainer without it). The same release took the quadratic shares→weight formula (v0.0.3)."""
KUBELET_ROUNDED_SINCE: Final = (1, 34, 0)
"""Kubernetes 1.34 vendors opencontainers/cgroups v0.0.3, 1.33 v0.0.1, 1.32 and older runc's libcontainer
(go.mod of each release); the kubelet's pod and QoS slices go through its systemd manager's `Set`
(pkg/kubelet/cm/cgroup_manager_linux.go:372-383 `Update`, 424-430 `Create`: `Apply(-1)` then `Set`)."""
SYSTEMD_TWO_DECIMALS: Final = "systemd/systemd#33171 (June 2024)"
"""Since this change systemd writes `CPUQuota=` with two decimals (src/core/dbus-cgroup.c,
`"CPUQuota=" USEC_FMT ".%02" PRI_USEC "%%"`); before it, truncated to whole percents (`"CPUQuota=%0.f%%"`
of `cpu_quota_per_sec_usec / 10000`). runc sends whole percents to either, so nothing it sends is lost."""

_MSEC: Final = 1_000
_SEC: Final = 1_000_000
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """"1.1.5+ds1" (Debian's runc), "v1.36.2", "runc version 1.3.2" -> (major, minor, patch)."""
    m = _VERSION.search(text)
    if m is None:
        raise ValueError(f"no version in {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def runc_quota_write(version: tuple[int, ...]) -> QuotaWrite:
    """How runc (the runtime, for container scopes) writes a quota, by its version."""
    return QuotaWrite.ROUNDED if tuple(version) >= RUNC_ROUNDED_SINCE else QuotaWrite.EXACT


def kubelet_quota_write(version: tuple[int, ...]) -> QuotaWrite:
    """How the kubelet writes a pod or QoS slice's quota, by its version."""
    return QuotaWrite.ROUNDED if tuple(version) >= KUBELET_ROUNDED_SINCE else QuotaWrite.EXACT


def runc_quota_write_of_weight_formula(formula: str) -> QuotaWrite | None:
    """runc's quota write told from its shares→weight formula (both changed in runc 1.3.2): linear -> exact,
    quadratic -> rounded; None for anything else (mixed, unknown)."""
    return {"linear": QuotaWrite.EXACT, "quadratic": QuotaWrite.ROUNDED}.get(formula)


def written_cpu_max(quota_us: int | None, period_us: int | None, write: QuotaWrite) -> tuple[int, int] | None:
    """(quota, period) in the file right after a writer set `quota_us`/`period_us` through the systemd driver
    (quota -1 = "max"); None when nothing is sent. fs2/cpu.go `setCPU` writes `"<quota|max> <period>"`
    (period 0 as 100000); an exact writer the quota it was asked for, a rounded one `systemd_rounded_quota`."""
    quota, period = quota_us or 0, period_us or 0
    if quota == 0 and period == 0:
        return None
    if quota > 0 and write is QuotaWrite.ROUNDED:
        quota = systemd_rounded_quota(quota, period)
    return (quota if quota > 0 else UNLIMITED), period or DEFAULT_PERIOD_US


def reapplied_cpu_max(quota_us: int | None, period_us: int | None) -> tuple[int, int] | None:
    """(quota, period) after systemd re-applies the unit, whichever writer set it: what it keeps."""
    return systemd_cpu_max(quota_us, period_us)


def cpu_max_forms(quota_us: int | None, period_us: int | None) -> tuple[tuple[int, int], ...]:
    """Every (quota, period) the file may hold for the desired values under the systemd driver: systemd's
    own first (what it keeps, and what the agent writes), the exact quota last; one form when they agree
    (a whole percent, "max"). Empty when nothing is sent."""
    out: list[tuple[int, int]] = []
    for form in (
        reapplied_cpu_max(quota_us, period_us),
        written_cpu_max(quota_us, period_us, QuotaWrite.ROUNDED),
        written_cpu_max(quota_us, period_us, QuotaWrite.EXACT),
    ):
        if form is not None and form not in out:
            out.append(form)
    return tuple(out)


def cpu_file_forms(version: CgroupVersion, quota_us: int | None, period_us: int | None) -> dict[str, tuple[str, ...]]:
    """The strings each CPU limit file may hold (`cpu.max` on v2; `cpu.cfs_quota_us` and
    `cpu.cfs_period_us` on v1), systemd's first; {} when nothing is sent."""
    return dict(_cpu_file_forms(version, quota_us, period_us))


@functools.lru_cache(maxsize=4096)
def other_file_forms(version: CgroupVersion, quota_us: int | None, period_us: int | None) -> dict[str, tuple[str, ...]]:
    """`cpu_file_forms` less systemd's (the rendered value), only for files with more than one: what a diff
    accepts besides it. Cached, and so shared: never change the result."""
    return {name: forms[1:] for name, forms in _cpu_file_forms(version, quota_us, period_us) if len(forms) > 1}


@functools.lru_cache(maxsize=4096)
def _cpu_file_forms(
    version: CgroupVersion, quota_us: int | None, period_us: int | None
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    # a node's pods share few limits: each is worked out once, not once per cgroup and pass
    forms = cpu_max_forms(quota_us, period_us)
    if not forms:
        return ()
    if version is CgroupVersion.V2:
        return (("cpu.max", tuple(render_cpu_max(q, p) for q, p in forms)),)
    quotas = tuple(dict.fromkeys(str(q) for q, _ in forms))
    periods = tuple(dict.fromkeys(str(p) for _, p in forms))
    return ("cpu.cfs_period_us", periods), ("cpu.cfs_quota_us", quotas)


def persisted_quota_per_sec(per_sec_us: int, two_decimals: bool) -> int:
    """The `CPUQuotaPerSecUSec` a daemon-reload restores from the unit's file: whole percents (older systemd)
    or hundredths of one (`SYSTEMD_TWO_DECIMALS`), truncated. `USEC_INFINITY` is kept."""
    if per_sec_us == USEC_INFINITY:
        return per_sec_us
    step = QUOTA_STEP_PER_SEC_US // 100 if two_decimals else QUOTA_STEP_PER_SEC_US
    return per_sec_us // step * step


def applied_cpu_quota(per_sec_us: int, period_us: int | None) -> tuple[int, int]:
    """(quota, period) systemd writes for a unit's `CPUQuotaPerSecUSec` and `CPUQuotaPeriodUSec` (None: never
    set, the default 100 ms): src/core/cgroup.c `cgroup_apply_unified_cpu_quota` and
    `cgroup_cpu_adjust_period` — infinity with the default period; otherwise the period raised to 1 ms and to
    what makes the quota at least 1 ms, at most 1 s, and the quota `MAX(per_sec * period / 1 s, 1 ms)`."""
    if per_sec_us == USEC_INFINITY:
        return UNLIMITED, DEFAULT_PERIOD_US
    requested = period_us or DEFAULT_PERIOD_US
    period = min(max(requested, _MSEC, _MSEC * _SEC // per_sec_us), _SEC)
    return max(per_sec_us * period // _SEC, _MSEC), period


def _bytes(value: int, version: CgroupVersion) -> str:
    if value == UINT64_MAX:
        return "max" if version is CgroupVersion.V2 else str(UNLIMITED)
    return str(value)


def reapplied_files(properties: Iterable[Property], version: CgroupVersion) -> dict[str, str]:
    """What systemd writes to a unit's cgroup files from its properties when it (re-)applies the unit:
    src/core/cgroup.c `cgroup_context_apply` — v2 `cpu.weight`, `cpu.max` (`cgroup_apply_unified_cpu_quota`),
    `memory.max`/`memory.low` (`cgroup_apply_unified_memory_limit`, "max" for infinity); v1 `cpu.shares`,
    `cpu.cfs_period_us`/`cpu.cfs_quota_us` (`cgroup_apply_legacy_cpu_quota`, -1 for infinity),
    `memory.limit_in_bytes` (-1 for infinity). Integers and bytes as they are; the kernel then keeps memory
    in whole pages."""
    props = {p.name: p.value for p in properties}
    out: dict[str, str] = {}
    v2 = version is CgroupVersion.V2
    if v2 and isinstance(w := props.get("CPUWeight"), int):
        out["cpu.weight"] = str(w)
    if not v2 and isinstance(s := props.get("CPUShares"), int):
        out["cpu.shares"] = str(s)
    per_sec, period = props.get("CPUQuotaPerSecUSec"), props.get("CPUQuotaPeriodUSec")
    if isinstance(per_sec, int):
        q, p = applied_cpu_quota(per_sec, period if isinstance(period, int) else None)
        if v2:
            out["cpu.max"] = render_cpu_max(q, p)
        else:
            out["cpu.cfs_period_us"], out["cpu.cfs_quota_us"] = str(p), str(q)
    for name, file in (("MemoryMax", "memory.max"), ("MemoryLow", "memory.low"), ("MemoryLimit", "memory.limit_in_bytes")):
        if isinstance(v := props.get(name), int):
            out[file] = _bytes(v, version)
    return out
