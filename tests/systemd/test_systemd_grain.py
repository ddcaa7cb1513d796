"""Where systemd keeps a value at a coarser grain than the cgroup file, per writer and version (cgroupfs.systemd.grain).

Checked in the sources (line numbers at the named tag):
- runc v1.1.5 libcontainer/cgroups/systemd/common.go:480-511 `addCpuQuota(..., quota int64, ...)` rounds
  `cpuQuotaPerSecUSec` up to 10 ms and keeps `quota` as it is; v2.go:436-449 `Set` then `fsMgr.Set(r)`, and
  fs2/cpu.go:41 writes `cpu.max` from the unrounded `r.CpuQuota` (the same in 1.2.x: common.go:284).
- opencontainers/cgroups 83f2519 "systemd: Write rounded CPU quota to cgroupfs" (first in v0.0.2): v0.0.6
  systemd/common.go:300-333 `addCPUQuota(..., quota *int64, ...)` sets `*quota` to the rounded value,
  systemd/v2.go:500-516 `Set` passes that copy to `fsMgr.Set`; fs2/cpu.go:54-66 writes `"<quota|max> <period>"`.
- runc go.mod: v1.3.0 and v1.3.1 vendor opencontainers/cgroups v0.0.1, v1.3.2 v0.0.4, v1.4.0 v0.0.6.
- Kubernetes go.mod (openshift/microshift deps): 1.32 runc v1.2.1's libcontainer, 1.33 cgroups v0.0.1, 1.34 and
  1.35 v0.0.3, 1.36 v0.0.6; pkg/kubelet/cm/cgroup_manager_linux.go (1.36.2):273 `getCPUWeight` (linear),
  372-383 `Update` -> `manager.Set`, 424-430 `Create` -> `Apply(-1)` then `Set`.
- systemd src/core/dbus-cgroup.c `bus_cgroup_set_property`: `CPUQuotaPerSecUSec` written to the unit as
  `"CPUQuota=%0.f%%"` of `cpu_quota_per_sec_usec / 10000` (truncated; two decimals since systemd/systemd#33171),
  `CPUQuotaPeriodSec=` with `FORMAT_TIMESPAN(period, 1)` (µs exact), `CPUWeight=`, `MemoryMax=` etc. with
  `%" PRIu64` (exact); src/core/cgroup.c `cgroup_apply_unified_cpu_quota` / `cgroup_cpu_adjust_period`.
"""

from __future__ import annotations

import pytest

from cgroupfs import layout
from cgroupfs.convert import render_cpu_max
from cgroupfs.layout import Hierarchy, RenderOptions, render
from cgroupfs.systemd.grain import (
    QuotaWrite,
    applied_cpu_quota,
    cpu_file_forms,
    cpu_max_forms,
    kubelet_quota_write,
    parse_version,
    persisted_quota_per_sec,
    reapplied_cpu_max,
    reapplied_files,
    runc_quota_write,
    runc_quota_write_of_weight_formula,
    written_cpu_max,
)
from cgroupfs.systemd.properties import USEC_INFINITY, cpu_quota_per_sec_usec, unit_properties
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues, CgroupVersion, DriverKind

V1, V2 = CgroupVersion.V1, CgroupVersion.V2
EXACT, ROUNDED = QuotaWrite.EXACT, QuotaWrite.ROUNDED

# (writer, version as the node reports it, how it writes a quota to the file)
WRITERS = [
    pytest.param("runc", "1.1.5+ds1", EXACT, id="runc 1.1.5 (Debian 12)"),
    pytest.param("runc", "1.1.15", EXACT, id="runc 1.1.15"),
    pytest.param("runc", "1.2.9", EXACT, id="runc 1.2.9: libcontainer without the fix"),
    pytest.param("runc", "1.3.0", EXACT, id="runc 1.3.0: cgroups v0.0.1"),
    pytest.param("runc", "1.3.1", EXACT, id="runc 1.3.1: cgroups v0.0.1"),
    pytest.param("runc", "runc version 1.3.2", ROUNDED, id="runc 1.3.2: cgroups v0.0.4"),
    pytest.param("runc", "1.4.0", ROUNDED, id="runc 1.4.0: cgroups v0.0.6"),
    pytest.param("kubelet", "v1.32.6", EXACT, id="kubelet 1.32: runc 1.2.1 libcontainer"),
    pytest.param("kubelet", "v1.33.4", EXACT, id="kubelet 1.33: cgroups v0.0.1"),
    pytest.param("kubelet", "v1.34.1", ROUNDED, id="kubelet 1.34: cgroups v0.0.3"),
    pytest.param("kubelet", "v1.35.3", ROUNDED, id="kubelet 1.35: cgroups v0.0.3"),
    pytest.param("kubelet", "v1.36.2", ROUNDED, id="kubelet 1.36: cgroups v0.0.6"),
]


@pytest.mark.parametrize(("writer", "version", "write"), WRITERS)
def test_each_writer_writes_its_quota_exact_or_rounded(writer: str, version: str, write: QuotaWrite) -> None:
    of = runc_quota_write if writer == "runc" else kubelet_quota_write
    assert of(parse_version(version)) is write


@pytest.mark.parametrize(
    ("formula", "write"), [("linear", EXACT), ("quadratic", ROUNDED), ("mixed", None), ("unknown", None)]
)
def test_runc_changed_its_weight_formula_and_its_quota_in_one_release(formula: str, write: QuotaWrite | None) -> None:
    """runc 1.3.2 took both (cgroups v0.0.3 quadratic weights, v0.0.2 rounded quotas): the container weight
    formula read from the files tells the quota write too."""
    assert runc_quota_write_of_weight_formula(formula) is write


def test_a_text_without_a_version_is_refused() -> None:
    with pytest.raises(ValueError, match="no version"):
        parse_version("runc")


# (quota, period): the file right after an exact writer, after a rounded one, after systemd's next re-apply
QUOTAS = [
    pytest.param(1100, 100000, (1100, 100000), (2000, 100000), (2000, 100000), id="11m: the issue's container"),
    pytest.param(15500, 100000, (15500, 100000), (16000, 100000), (16000, 100000), id="155m: a pod-level limit"),
    pytest.param(13300, 100000, (13300, 100000), (14000, 100000), (14000, 100000), id="133m: a resize"),
    pytest.param(1000, 100000, (1000, 100000), (1000, 100000), (1000, 100000), id="10m: the kubelet's minimum"),
    pytest.param(150000, 100000, (150000, 100000), (150000, 100000), (150000, 100000), id="1.5 CPUs: whole"),
    pytest.param(1100, 50000, (1100, 50000), (1500, 50000), (1500, 50000), id="22m at a 50 ms period"),
    pytest.param(123456, None, (123456, 100000), (124000, 100000), (124000, 100000), id="TestAddCPUQuota fraction"),
    pytest.param(500000, 900000, (500000, 900000), (504000, 900000), (504000, 900000), id="round up at division"),
    pytest.param(UNLIMITED, 100000, (UNLIMITED, 100000), (UNLIMITED, 100000), (UNLIMITED, 100000), id="no limit"),
    # the period alone: "max" with it for runc, systemd's default period for infinity
    pytest.param(None, 50000, (UNLIMITED, 50000), (UNLIMITED, 50000), (UNLIMITED, 100000), id="period alone"),
]


@pytest.mark.parametrize(("quota", "period", "exact", "rounded", "reapplied"), QUOTAS)
def test_what_each_writer_leaves_and_what_systemd_keeps(
    quota: int | None, period: int | None, exact: tuple[int, int], rounded: tuple[int, int], reapplied: tuple[int, int]
) -> None:
    assert written_cpu_max(quota, period, EXACT) == exact
    assert written_cpu_max(quota, period, ROUNDED) == rounded
    assert reapplied_cpu_max(quota, period) == reapplied
    # systemd turns either into its own at its next re-apply: from the unit's property, not from the file
    props = unit_properties(CgroupValues(cpu_quota=quota, cpu_period=period), V2, "linear")
    assert reapplied_files(props, V2)["cpu.max"] == render_cpu_max(*reapplied)
    # what the agent renders for the systemd driver is what systemd keeps, and the other forms are accepted
    forms = cpu_max_forms(quota, period)
    assert forms[0] == reapplied and {exact, rounded} <= set(forms)


def test_nothing_sent_has_no_form() -> None:
    assert written_cpu_max(None, None, EXACT) is None
    assert cpu_max_forms(None, None) == ()
    assert cpu_file_forms(V2, None, 0) == {}


FILE_FORMS = [
    pytest.param(V2, 1100, 100000, {"cpu.max": ("2000 100000", "1100 100000")}, id="v2 two forms"),
    pytest.param(V2, 2000, 100000, {"cpu.max": ("2000 100000",)}, id="v2 a whole percent"),
    pytest.param(V1, 1100, 100000, {"cpu.cfs_period_us": ("100000",), "cpu.cfs_quota_us": ("2000", "1100")},
                 id="v1 the quota's two forms, one period"),
]


@pytest.mark.parametrize(("version", "quota", "period", "expected"), FILE_FORMS)
def test_file_forms(version: CgroupVersion, quota: int, period: int, expected: dict[str, tuple[str, ...]]) -> None:
    assert cpu_file_forms(version, quota, period) == expected
    accepted = layout.systemd_accept(version, CgroupValues(cpu_quota=quota, cpu_period=period))
    assert accepted == {name: forms[1:] for name, forms in expected.items() if len(forms) > 1}


@pytest.mark.parametrize("version", [V1, V2])
def test_render_for_the_systemd_driver_is_systemds_form(version: CgroupVersion) -> None:
    hierarchy = (Hierarchy(v1={"cpu": "cpu"}) if version is V1
                 else Hierarchy(unified="", unified_controllers=frozenset({"cpu"})))
    values = CgroupValues(cpu_quota=1100, cpu_period=100000)
    rendered = {s.filename: s.value for s in render(CgroupName(("kubepods",)), values, hierarchy,
                                                    RenderOptions(driver=DriverKind.SYSTEMD))}
    for name, forms in cpu_file_forms(version, 1100, 100000).items():
        assert rendered[name] == forms[0]


# systemd's own write for a CPUQuotaPerSecUSec / CPUQuotaPeriodUSec (cgroup.c, `cgroup_cpu_adjust_period`)
APPLIED = [
    pytest.param(20000, None, (2000, 100000), id="20 ms/s, default period"),
    pytest.param(USEC_INFINITY, 50000, (UNLIMITED, 100000), id="infinity: always the default period"),
    pytest.param(10000, 10000, (1000, 100000), id="1 %: period raised so the quota is 1 ms"),
    pytest.param(100000, 2000000, (100000, 1000000), id="period clamped to 1 s"),
    pytest.param(11000, None, (1100, 100000), id="a per-second value runc never sends: applied as it is"),
]


@pytest.mark.parametrize(("per_sec", "period", "expected"), APPLIED)
def test_what_systemd_writes_for_its_properties(per_sec: int, period: int | None, expected: tuple[int, int]) -> None:
    assert applied_cpu_quota(per_sec, period) == expected


# CPUQuotaPerSecUSec a daemon-reload restores from the unit's file: older systemd whole percents, newer hundredths
PERSISTED = [
    pytest.param(20000, False, 20000, id="runc's 11m: kept by older systemd"),
    pytest.param(20000, True, 20000, id="runc's 11m: kept by newer systemd"),
    pytest.param(11000, False, 10000, id="an unrounded 11m: truncated by older systemd"),
    pytest.param(11000, True, 11000, id="an unrounded 11m: kept by newer systemd"),
    pytest.param(11050, True, 11000, id="below a hundredth of a percent: truncated by newer systemd too"),
    pytest.param(USEC_INFINITY, False, USEC_INFINITY, id="infinity"),
]


@pytest.mark.parametrize(("per_sec", "two_decimals", "expected"), PERSISTED)
def test_what_a_daemon_reload_restores(per_sec: int, two_decimals: bool, expected: int) -> None:
    assert persisted_quota_per_sec(per_sec, two_decimals) == expected


@pytest.mark.parametrize("quota", [1000, 1100, 1999, 15500, 13300, 123456, 250000])
def test_what_runc_and_the_agent_send_survives_any_systemds_reload(quota: int) -> None:
    per_sec = cpu_quota_per_sec_usec(quota, 100000)
    assert persisted_quota_per_sec(per_sec, False) == persisted_quota_per_sec(per_sec, True) == per_sec


MiB = 1 << 20
# The rest of the systemd path: what a writer puts in the file (fsMgr.Set: fs2/cpu.go:32 cpu.weight, fs2/memory.go:63-72
# memory.max/memory.low, fs/cpu.go cpu.shares and cfs_*; the value as it is) against what systemd writes from
# the properties the same writer sent (genV2ResourcesProperties systemd/v2.go:227-260, genV1ResourcesProperties
# v1.go:86-94), both as the kernel reads them back: one grain, so a re-apply changes nothing.
SAME_GRAIN = [
    pytest.param(CgroupValues(cpu_shares=1024), V2, "linear", id="kubelet pod weight (linear 39)"),
    pytest.param(CgroupValues(cpu_shares=1024), V2, "quadratic", id="runc >= 1.3.2 container weight (100)"),
    pytest.param(CgroupValues(cpu_shares=11), V2, "linear", id="11m request: weight 1"),
    pytest.param(CgroupValues(cpu_shares=262144), V2, "quadratic", id="the largest weight"),
    pytest.param(CgroupValues(cpu_shares=1024), V1, "linear", id="v1 shares as they are"),
    pytest.param(CgroupValues(memory_limit=100_000_000), V2, "linear", id="100M: both read back 99999744"),
    pytest.param(CgroupValues(memory_limit=64 * MiB), V2, "linear", id="whole pages"),
    pytest.param(CgroupValues(memory_limit=UNLIMITED), V2, "linear", id="unlimited memory: max"),
    pytest.param(CgroupValues(memory_reservation=50_000_001), V2, "linear", id="memory.low, not page aligned"),
    pytest.param(CgroupValues(memory_limit=100_000_000), V1, "linear", id="v1 memory limit"),
    pytest.param(CgroupValues(memory_limit=UNLIMITED), V1, "linear", id="v1 unlimited: -1"),
    pytest.param(CgroupValues(cpu_quota=25000, cpu_period=50000), V2, "linear", id="CPUCFSQuotaPeriod 50 ms, whole"),
    pytest.param(CgroupValues(cpu_quota=50000, cpu_period=1000000), V1, "linear", id="v1 period 1 s"),
    pytest.param(CgroupValues(cpu_quota=UNLIMITED, cpu_period=100000), V2, "linear", id="no CPU limit"),
]


@pytest.mark.parametrize(("values", "version", "formula"), SAME_GRAIN)
def test_everything_else_systemd_keeps_at_the_files_grain(
    values: CgroupValues, version: CgroupVersion, formula: str
) -> None:
    controllers = frozenset({"cpu", "memory"})
    hierarchy = (Hierarchy(v1={c: c for c in controllers}) if version is V1
                 else Hierarchy(unified="", unified_controllers=controllers))
    by_writer = {s.filename: s.value for s in render(CgroupName(("kubepods", "pod1")), values, hierarchy,
                                                     RenderOptions(weight_formula=formula))}
    by_systemd = reapplied_files(unit_properties(values, version, formula), version)
    assert by_systemd, "the writer sent properties"
    for name, text in by_systemd.items():
        assert layout.canonical(name, text) == layout.canonical(name, by_writer[name]), name


def test_only_the_quota_differs_where_it_is_not_a_whole_percent() -> None:
    """The kubelet's pod of 11m, 100M: one file of five has two forms, and only under an exact writer."""
    values = CgroupValues(cpu_shares=11, cpu_quota=1100, cpu_period=100000, memory_limit=100_000_000,
                          memory_reservation=0)
    hierarchy = Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory"}))
    by_writer = {s.filename: s.value for s in render(CgroupName(("kubepods", "pod1")), values, hierarchy, RenderOptions())}
    by_systemd = reapplied_files(unit_properties(values, V2, "linear"), V2)
    differ = {n for n in by_systemd if layout.canonical(n, by_systemd[n]) != layout.canonical(n, by_writer[n])}
    assert differ == {"cpu.max"}
    assert (by_writer["cpu.max"], by_systemd["cpu.max"]) == ("1100 100000", "2000 100000")
    assert set(layout.systemd_accept(V2, values)) == differ
