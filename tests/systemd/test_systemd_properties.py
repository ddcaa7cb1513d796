"""Unit property tables for the systemd driver, pinned to runc's (opencontainers/cgroups) own cases."""

from __future__ import annotations

import pytest

from cgroupfs.layout import Hierarchy, RenderOptions, render
from cgroupfs.systemd.properties import (
    MAX_CFS_QUOTA_US,
    UINT64_MAX,
    Property,
    cpu_quota_per_sec_usec,
    leftover_files,
    leftover_values,
    systemd_cpu_max,
    systemd_rounded_quota,
    unit_properties,
)
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues, CgroupVersion, DriverKind

V1, V2 = CgroupVersion.V1, CgroupVersion.V2
MiB = 1 << 20
GiB = 1 << 30


# (quota, period, CPUQuotaPerSecUSec, quota after rounding)
ROUNDING = [
    # opencontainers/cgroups systemd/systemd_test.go TestAddCPUQuota
    pytest.param(500000, 1000000, 500000, 500000, id="no round up"),
    pytest.param(123456, 0, 1240000, 124000, id="with fraction, default period"),
    pytest.param(500000, 900000, 560000, 504000, id="round up at division"),
    pytest.param(10000000000001, 0, 100000000010000, 10000000001000, id="large quota with round up"),
    pytest.param(MAX_CFS_QUOTA_US, 1500, 11728124029610000, MAX_CFS_QUOTA_US, id="max quota"),
    pytest.param(MAX_CFS_QUOTA_US, 0, UINT64_MAX, UNLIMITED, id="max quota, round up above max"),
    pytest.param(MAX_CFS_QUOTA_US + 1, 0, UINT64_MAX, UNLIMITED, id="quota too large"),
    pytest.param(2**63 - 1, 0, UINT64_MAX, UNLIMITED, id="max int64 quota"),
    # runc tests/integration/update.bats (check_cpu_quota ... "670ms", "50ms", "300ms")
    pytest.param(600000, 900000, 670000, 603000, id="update.bats 670ms"),
    pytest.param(5000, 0, 50000, 5000, id="update.bats quota without period"),
    pytest.param(30000, 100000, 300000, 30000, id="update.bats 300ms"),
    # the kubelet's boundaries: MinQuotaPeriod-derived 1 ms floor (10m CPU) and one above it
    pytest.param(1000, 100000, 10000, 1000, id="kubelet minimum quota"),
    pytest.param(1001, 100000, 20000, 2000, id="one above a whole percent"),
    pytest.param(999, 100000, 10000, 1000, id="one below a whole percent"),
    pytest.param(150000, 100000, 1500000, 150000, id="1.5 CPUs"),
    pytest.param(UNLIMITED, 100000, UINT64_MAX, UNLIMITED, id="unlimited"),
    pytest.param(0, 100000, UINT64_MAX, 0, id="unset"),
]


@pytest.mark.parametrize(("quota", "period", "per_sec", "rounded"), ROUNDING)
def test_runc_quota_rounding(quota: int, period: int, per_sec: int, rounded: int) -> None:
    assert cpu_quota_per_sec_usec(quota, period) == per_sec
    assert systemd_rounded_quota(quota, period) == rounded


def test_negative_period_is_rejected() -> None:
    with pytest.raises(ValueError, match="period"):
        systemd_rounded_quota(1000, -1)


# (quota, period) -> what systemd itself writes (quota, period), or None when nothing is sent
SYSTEMD_CPU_MAX = [
    pytest.param(150000, 100000, (150000, 100000), id="kubelet 1.5 CPUs"),
    pytest.param(123456, None, (124000, 100000), id="rounded, default period"),
    pytest.param(UNLIMITED, 50000, (UNLIMITED, 100000), id="infinity always gets the default period"),
    pytest.param(None, 50000, (UNLIMITED, 100000), id="period alone is infinity"),
    pytest.param(None, None, None, id="nothing sent"),
    pytest.param(1000, 10000, (1000, 10000), id="10 percent of a 10 ms period"),
    pytest.param(100, 10000, (1000, 100000), id="1 percent: period raised so the quota is 1 ms"),
    pytest.param(200000, 2000000, (100000, 1000000), id="period clamped to 1 s"),
]


@pytest.mark.parametrize(("quota", "period", "expected"), SYSTEMD_CPU_MAX)
def test_systemd_cpu_max(quota: int | None, period: int | None, expected: tuple[int, int] | None) -> None:
    assert systemd_cpu_max(quota, period) == expected


BURSTABLE = CgroupValues(cpu_shares=1024, cpu_quota=150000, cpu_period=100000, memory_limit=512 * MiB)

PROPERTIES = [
    pytest.param(
        BURSTABLE,
        V2,
        "linear",
        (
            Property("MemoryMax", "t", 512 * MiB),
            Property("CPUWeight", "t", 39),
            Property("CPUQuotaPeriodUSec", "t", 100000),
            Property("CPUQuotaPerSecUSec", "t", 1500000),
        ),
        id="v2 burstable pod, kubelet's linear weight",
    ),
    pytest.param(
        BURSTABLE,
        V2,
        "quadratic",
        (
            Property("MemoryMax", "t", 512 * MiB),
            Property("CPUWeight", "t", 100),
            Property("CPUQuotaPeriodUSec", "t", 100000),
            Property("CPUQuotaPerSecUSec", "t", 1500000),
        ),
        id="v2 quadratic weight",
    ),
    pytest.param(
        CgroupValues(cpu_shares=2),
        V2,
        "linear",
        (Property("CPUWeight", "t", 1),),
        id="v2 besteffort",
    ),
    pytest.param(
        CgroupValues(memory_limit=UNLIMITED, cpu_quota=UNLIMITED, cpu_period=100000),
        V2,
        "linear",
        (
            Property("MemoryMax", "t", UINT64_MAX),
            Property("CPUQuotaPeriodUSec", "t", 100000),
            Property("CPUQuotaPerSecUSec", "t", UINT64_MAX),
        ),
        id="v2 unlimited is uint64 max (infinity)",
    ),
    pytest.param(
        CgroupValues(memory_reservation=0),
        V2,
        "linear",
        (Property("MemoryLow", "t", 0),),
        id="v2 memory.low may be lowered to 0",
    ),
    pytest.param(
        CgroupValues(memory_reservation=256 * MiB, memory_limit=0),
        V2,
        "linear",
        (Property("MemoryLow", "t", 256 * MiB),),
        id="v2 a zero limit is runc's unset",
    ),
    pytest.param(
        CgroupValues(cpu_quota=123456),
        V2,
        "linear",
        (Property("CPUQuotaPerSecUSec", "t", 1240000),),
        id="quota without period",
    ),
    pytest.param(
        CgroupValues(cpu_period=1000000),
        V2,
        "linear",
        (Property("CPUQuotaPeriodUSec", "t", 1000000), Property("CPUQuotaPerSecUSec", "t", UINT64_MAX)),
        id="period without quota (runc: set cpu period with no quota)",
    ),
    pytest.param(CgroupValues(), V2, "linear", (), id="nothing"),
    pytest.param(
        BURSTABLE,
        V1,
        "linear",
        (
            Property("MemoryLimit", "t", 512 * MiB),
            Property("CPUShares", "t", 1024),
            Property("CPUQuotaPeriodUSec", "t", 100000),
            Property("CPUQuotaPerSecUSec", "t", 1500000),
        ),
        id="v1 burstable pod",
    ),
    pytest.param(
        CgroupValues(memory_limit=UNLIMITED, memory_reservation=GiB, cpu_shares=2),
        V1,
        "quadratic",
        (Property("MemoryLimit", "t", UINT64_MAX), Property("CPUShares", "t", 2)),
        id="v1 has no reservation property; shares are not converted",
    ),
]


@pytest.mark.parametrize(("values", "version", "formula", "expected"), PROPERTIES)
def test_unit_properties(
    values: CgroupValues, version: CgroupVersion, formula: str, expected: tuple[Property, ...]
) -> None:
    assert unit_properties(values, version, formula) == expected


def test_every_property_value_fits_its_signature() -> None:
    for param in PROPERTIES:
        values, version, formula, _ = param.values
        for prop in unit_properties(values, version, formula):  # type: ignore[arg-type]
            assert prop.signature == "t"
            assert isinstance(prop.value, int) and 0 <= prop.value <= UINT64_MAX


def test_unknown_weight_formula_is_rejected() -> None:
    with pytest.raises(ValueError, match="weight formula"):
        unit_properties(CgroupValues(), V2, "cubic")


def test_invalid_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="-2"):
        unit_properties(CgroupValues(memory_limit=-2), V2, "linear")


HUGE = {2 * MiB: 4 * MiB, GiB: GiB}

LEFTOVERS = [
    pytest.param(CgroupValues(hugetlb=HUGE), V2, ("hugetlb.2MB.max", "hugetlb.1GB.max"), id="v2 hugetlb"),
    pytest.param(
        CgroupValues(hugetlb=HUGE, memory_reservation=GiB),
        V1,
        ("memory.soft_limit_in_bytes", "hugetlb.2MB.limit_in_bytes", "hugetlb.1GB.limit_in_bytes"),
        id="v1 hugetlb and soft limit",
    ),
    pytest.param(CgroupValues(memory_reservation=GiB), V2, (), id="v2 memory.low is a property"),
    pytest.param(BURSTABLE, V1, (), id="nothing left over"),
]


@pytest.mark.parametrize(("values", "version", "expected"), LEFTOVERS)
def test_leftover_files(values: CgroupValues, version: CgroupVersion, expected: tuple[str, ...]) -> None:
    assert leftover_files(values, version) == expected


@pytest.mark.parametrize(("values", "version", "expected"), LEFTOVERS)
def test_leftover_values_render_to_the_leftover_files(
    values: CgroupValues, version: CgroupVersion, expected: tuple[str, ...]
) -> None:
    """The caller writes leftovers through layout.render; both must name the same files."""
    controllers = {"cpu": "cpu", "memory": "memory", "hugetlb": "hugetlb"}
    hierarchy = (
        Hierarchy(v1=controllers)
        if version is V1
        else Hierarchy(unified="", unified_controllers=frozenset(controllers))
    )
    name = CgroupName(("kubepods", "burstable", "pod1"))
    settings = render(
        name, leftover_values(values, version), hierarchy, RenderOptions(driver=DriverKind.SYSTEMD)
    )
    assert tuple(s.filename for s in settings) == expected
    assert all("kubepods-burstable-pod1.slice" in s.directory for s in settings)


def test_soft_limit_name_matches_layout() -> None:
    from cgroupfs.layout import MEMORY_SOFT
    from cgroupfs.systemd.properties import V1_SOFT_LIMIT

    assert V1_SOFT_LIMIT == MEMORY_SOFT
