"""Edge cases of anchors §1, the conversions at their bounds: millicores to shares and quota, shares to
weight both ways, hugepage size names, saturated and unlimited kernel values — each a named case with the
kubelet's (or runc's) expected value."""

from __future__ import annotations

import pytest

from agent.core.compute import ComputeConfig, compute_node
from agent.core.compute.cpu import (
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    quota_to_milli_cpu,
    shares_to_milli_cpu,
)
from cgroupfs.convert import (
    hugepage_size_name,
    shares_to_weight_linear,
    shares_to_weight_quadratic,
    weight_to_shares_linear,
)
from tests.unit.podbuild import ctr, pod, view

MI = 1024**2
GI = 1024**3
H2M = 2 * MI
H1G = GI


@pytest.mark.parametrize(
    ("milli", "shares"),
    [(0, 2), (1, 2), (2, 2), (3, 3), (10, 10), (100, 102), (1000, 1024), (256000, 262144), (300000, 262144)],
    ids=[
        "zero-is-min",
        "1m-rounds-to-min",
        "2m",
        "3m",
        "10m",
        "100m",
        "1cpu",
        "256cpu-max",
        "above-max-clamped",
    ],
)
def test_milli_cpu_to_shares(milli: int, shares: int) -> None:
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize(
    ("milli", "period", "quota"),
    [
        (0, 100000, 0),
        (1, 100000, 1000),
        (5, 100000, 1000),
        (9, 100000, 1000),
        (10, 100000, 1000),
        (11, 100000, 1100),
        (250, 100000, 25000),
        (1500, 100000, 150000),
        (100, 50000, 5000),
        (10, 50000, 1000),
    ],
    ids=[
        "unset",
        "1m-min-1ms",
        "5m-min-1ms",
        "9m-min-1ms",
        "10m-exactly-1ms",
        "11m",
        "250m",
        "1.5cpu",
        "period-50ms",
        "period-50ms-min",
    ],
)
def test_milli_cpu_to_quota(milli: int, period: int, quota: int) -> None:
    assert milli_cpu_to_quota(milli, period) == quota


@pytest.mark.parametrize(
    ("shares", "linear", "quadratic"),
    [
        (2, 1, 1),
        (3, 1, 2),
        (1024, 39, 100),
        (2000, 77, 170),
        (262143, 9999, 10000),
        (262144, 10000, 10000),
        (300000, 10000, 10000),
    ],
    ids=["min", "min+1", "default-1024", "runc-issue-4896", "max-1", "max", "above-max"],
)
def test_shares_to_weight(shares: int, linear: int, quadratic: int) -> None:
    assert shares_to_weight_linear(shares) == linear
    assert shares_to_weight_quadratic(shares) == quadratic


def test_reverse_conversions() -> None:
    assert shares_to_milli_cpu(1024) == 1000
    assert shares_to_milli_cpu(1) == 0
    assert quota_to_milli_cpu(-1, 100000) == 0
    assert quota_to_milli_cpu(150000, 100000) == 1500
    assert weight_to_shares_linear(39) == 998  # the kubelet's lossy inverse: 1024 -> 39 -> 998
    assert weight_to_shares_linear(1) == 2


@pytest.mark.parametrize(
    ("size", "name"), [(H2M, "2MB"), (H1G, "1GB"), (64 * 1024, "64KB"), (16 * GI, "16GB")]
)
def test_hugepage_size_names(size: int, name: str) -> None:
    assert hugepage_size_name(size) == name


def test_hugetlb_saturation_reads_as_unlimited_and_v2_unlimited_renders_max() -> None:
    from cgroupfs import layout
    from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues

    assert layout.canonical("hugetlb.2MB.max", "9223372036852678656") == "max"  # 2 MiB pages saturate here
    assert layout.canonical("hugetlb.2MB.max", "9223372036850581504") == "9223372036850581504"
    assert layout.canonical("hugetlb.2MB.limit_in_bytes", "-1") == "max"
    v2 = layout.Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory", "hugetlb"}))
    rendered = {
        s.filename: s.value
        for s in layout.render(
            CgroupName(("p",)),
            CgroupValues(cpu_shares=0, memory_reservation=UNLIMITED, hugetlb={H2M: UNLIMITED}),
            v2,
            layout.RenderOptions(weight_formula="quadratic"),
        )
    }
    assert rendered == {"memory.low": "max", "hugetlb.2MB.max": "max"}  # weight 0 means unset: not written


def test_container_cpu_weight_from_either_runtime_formula_is_converged() -> None:
    """runc < 1.3.2 (Debian 12) writes the linear weight, newer runc the quadratic one: neither flaps."""
    from agent.core.diff import Observation, desired_files, diff
    from cgroupfs import layout as lay

    raw = pod("p", [ctr("c", lim={"cpu": "1", "memory": "1Gi"})], uid="0e0e0e0e-1111-2222-3333-444444444444")
    raw["status"] = {"containerStatuses": [{"name": "c", "containerID": "containerd://" + "f" * 64}]}
    comp = compute_node([view(raw)], ComputeConfig())
    v2 = lay.Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory"}))
    files = desired_files(comp, v2, lay.RenderOptions(), lay.RenderOptions(weight_formula="quadratic"))
    weight = next(f for f in files if f.owner.value == "container" and f.setting.filename == "cpu.weight")
    for current, differs in (
        ("100", False),
        ("39", False),
        ("77", True),
    ):  # 1024 shares: quadratic 100, linear 39
        texts = {f.setting.path: f.setting.value for f in files} | {weight.setting.path: current}
        node = diff(comp, files, Observation(texts, {f.setting.directory: True for f in files}))
        assert any(c.setting.path == weight.setting.path for c in node.changes) is differs
