"""Which kernel files hold a cgroup's values, per cgroup version, and their exact string forms (pure).

`render` turns driver-agnostic `CgroupValues` into `FileSetting`s (path relative to --cgroupfs and the
exact string the kernel file takes). `canonical` normalises both a desired string and a read-back one
so that equal kernel states compare equal (page rounding, v1's unlimited read-back, "max").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from cgroupfs.convert import (
    PAGE_SIZE,
    V1_UNLIMITED_READBACK,
    hugepage_size_from_name,
    hugepage_size_name,
    page_round,
    parse_cpu_max,
    render_cpu_max,
    shares_to_weight_linear,
    shares_to_weight_quadratic,
)
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues, CgroupVersion, Controller, DriverKind

# v1 file names
CPU_SHARES: Final = "cpu.shares"
CPU_QUOTA: Final = "cpu.cfs_quota_us"
CPU_PERIOD: Final = "cpu.cfs_period_us"
MEMORY_LIMIT: Final = "memory.limit_in_bytes"
MEMORY_MEMSW: Final = "memory.memsw.limit_in_bytes"
MEMORY_SOFT: Final = "memory.soft_limit_in_bytes"
MEMORY_USAGE_V1: Final = "memory.usage_in_bytes"
# v2 file names
CPU_WEIGHT: Final = "cpu.weight"
CPU_MAX: Final = "cpu.max"
MEMORY_MAX: Final = "memory.max"
MEMORY_LOW: Final = "memory.low"
MEMORY_CURRENT: Final = "memory.current"


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where each controller is mounted, relative to --cgroupfs.

    `v1` maps a controller to its v1 mount directory ("cpu", or "cpu,cpuacct" on other machines);
    `unified` is the cgroup2 mount directory ("" on a pure v2 host, "unified" on a hybrid one) and
    `unified_controllers` what it offers.
    """

    v1: Mapping[str, str] = field(default_factory=dict)
    unified: str | None = None
    unified_controllers: frozenset[str] = frozenset()

    def locate(self, controller: Controller) -> tuple[CgroupVersion, str] | None:
        # a Controller is its name (StrEnum): it finds the str keys without its `.value`, which is slower
        if controller in self.v1:
            return CgroupVersion.V1, self.v1[controller]
        if self.unified is not None and controller in self.unified_controllers:
            return CgroupVersion.V2, self.unified
        return None

    @property
    def mode(self) -> str:
        if self.unified is not None and not self.v1:
            return "v2"
        if self.unified is not None and self.unified_controllers:
            return "hybrid"
        return "v1"


@dataclass(frozen=True, slots=True)
class FileSetting:
    """One kernel file and the exact string it should hold."""

    cgroup: CgroupName
    controller: Controller
    version: CgroupVersion
    directory: str  # relative to --cgroupfs, e.g. "cpu/kubepods/burstable/pod<uid>"
    filename: str
    value: str

    @property
    def path(self) -> str:
        return f"{self.directory}/{self.filename}" if self.directory else self.filename


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How values become files: the cgroup driver and the shares-to-weight formula."""

    driver: DriverKind = DriverKind.CGROUPFS
    weight_formula: str = "linear"  # "linear" (kubelet, pod and QoS cgroups) or "quadratic" (runc >= 1.3.2)


def _join(mount: str, below: str) -> str:
    return f"{mount}/{below}" if mount and below else mount or below


def cgroup_directory(
    name: CgroupName, controller: Controller, hierarchy: Hierarchy, driver: DriverKind
) -> str | None:
    loc = hierarchy.locate(controller)
    if loc is None:
        return None
    return _join(loc[1], cgroup_dir(name, driver))


def _v1_memory(value: int) -> str:
    return str(UNLIMITED) if value == UNLIMITED else str(value)


def _v2_memory(value: int) -> str:
    return "max" if value == UNLIMITED else str(value)


def render(
    name: CgroupName,
    values: CgroupValues,
    hierarchy: Hierarchy,
    opts: RenderOptions,
    subdir: str | None = None,
) -> tuple[FileSetting, ...]:
    """Every file a cgroup's values occupy. Controllers the node lacks are skipped (as the kubelet does).

    `subdir` overrides the directory below each mount (a container's cgroup, which is not named by the
    kubelet's rules); `name` then only labels the settings.
    """
    out: list[FileSetting] = []
    below = cgroup_dir(name, opts.driver) if subdir is None else subdir
    dirs: dict[str, str] = {}  # mount -> directory: one string shared by the cgroup's files (kept per pod)
    for controller, files in _RENDERERS:
        loc = hierarchy.locate(controller)
        if loc is None:
            continue
        version, mount = loc
        settings = files(version, values, opts)
        if not settings:
            continue
        directory = dirs.get(mount)
        if directory is None:
            directory = dirs[mount] = _join(mount, below)
        for filename, value in settings:
            out.append(FileSetting(name, controller, version, directory, filename, value))
    return tuple(out)


def _cpu_files(version: CgroupVersion, values: CgroupValues, opts: RenderOptions) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    quota, period = values.cpu_quota, values.cpu_period
    if opts.driver is DriverKind.SYSTEMD and (quota or period):
        # systemd keeps CPUQuota in whole percents: compare against what it will really write
        from cgroupfs.systemd.properties import systemd_cpu_max

        adjusted = systemd_cpu_max(quota, period)
        if adjusted is not None:
            quota, period = adjusted
    if version is CgroupVersion.V1:
        if values.cpu_shares is not None:
            out.append((CPU_SHARES, str(values.cpu_shares)))
        if period is not None:
            out.append((CPU_PERIOD, str(period)))
        if quota is not None:
            out.append((CPU_QUOTA, str(quota)))
        return out
    if values.cpu_shares is not None:
        weight = (
            shares_to_weight_quadratic(values.cpu_shares)
            if opts.weight_formula == "quadratic"
            else shares_to_weight_linear(values.cpu_shares)
        )
        if weight > 0:  # 0 means "unset" (runc); the kernel refuses it
            out.append((CPU_WEIGHT, str(weight)))
    if quota is not None or period is not None:
        out.append((CPU_MAX, render_cpu_max(quota, period)))
    return out


def systemd_accept(version: CgroupVersion, values: CgroupValues) -> Mapping[str, tuple[str, ...]]:
    """Under the systemd driver, the other strings each CPU limit file may hold for `values` besides the one
    `render` gives (systemd's, which it keeps): the exact quota a writer before opencontainers/cgroups v0.0.2
    leaves in the file until systemd's next re-apply (cgroupfs.systemd.grain). {} when every form agrees."""
    if not values.cpu_quota and not values.cpu_period:
        return {}
    from cgroupfs.systemd.grain import other_file_forms

    return other_file_forms(version, values.cpu_quota, values.cpu_period)


def _memory_files(version: CgroupVersion, values: CgroupValues, _: RenderOptions) -> list[tuple[str, str]]:
    v1 = version is CgroupVersion.V1
    text = _v1_memory if v1 else _v2_memory
    out: list[tuple[str, str]] = []
    if values.memory_limit is not None:
        out.append((MEMORY_LIMIT if v1 else MEMORY_MAX, text(values.memory_limit)))
    if values.memory_reservation is not None:
        out.append((MEMORY_SOFT if v1 else MEMORY_LOW, text(values.memory_reservation)))
    return out


def _hugetlb_files(version: CgroupVersion, values: CgroupValues, _: RenderOptions) -> list[tuple[str, str]]:
    if not values.hugetlb:  # a container's values (the runtime's), and most QoS tiers'
        return []
    v1 = version is CgroupVersion.V1
    text = _v1_memory if v1 else _v2_memory
    suffix = "limit_in_bytes" if v1 else "max"
    return [
        (f"hugetlb.{hugepage_size_name(size)}.{suffix}", text(limit)) for size, limit in sorted(values.hugetlb.items())
    ]


_RENDERERS: Final = (
    (Controller.CPU, _cpu_files),
    (Controller.MEMORY, _memory_files),
    (Controller.HUGETLB, _hugetlb_files),
)


def _hugetlb_page(filename: str) -> int | None:
    parts = filename.split(".")
    if len(parts) >= 3 and parts[0] == "hugetlb":
        try:
            return hugepage_size_from_name(parts[1])
        except ValueError:
            return None
    return None


def canonical(filename: str, text: str) -> str:
    """Normalise a file value so that kernel-equal states compare equal; raise ValueError on garbage."""
    text = text.strip()
    if filename == CPU_MAX:
        quota, period = parse_cpu_max(text)
        return render_cpu_max(quota, period)
    if (
        filename in (MEMORY_MAX, MEMORY_LOW)
        or filename.startswith("memory.")
        or filename.startswith("hugetlb.")
    ):
        if text == "max":
            return "max"
        number = int(text)
        page = _hugetlb_page(filename) or PAGE_SIZE
        # the kernel's page counter saturates at PAGE_COUNTER_MAX pages, rounded down to whole pages of
        # this file's size: hugetlb (2 MiB pages) reads "max" from 9223372036852678656 on
        ceiling = (V1_UNLIMITED_READBACK // PAGE_SIZE) // (page // PAGE_SIZE) * page
        if number == UNLIMITED or number >= ceiling:
            return "max"
        return str(page_round(number, page))
    return str(int(text))


def unlimited_is(filename: str, text: str) -> bool:
    try:
        return canonical(filename, text) == "max"
    except ValueError:
        return False
