"""Every worked example of seeds 001 and 002, with the defaulting rule of shared/seeds/README.md
(a container with a limit and no request has request = limit), computed exactly as the kubelet does."""

from __future__ import annotations

import pytest

from agent.core.compute import ComputeConfig, compute_node, compute_pod
from agent.core.model import UNLIMITED, QOSClass, Resources
from tests.unit.podbuild import ctr, pod, res, view

GI = 1024**3
M = 1000**2

# ---- seed 002 "Examples": Pod1..Pod5 -------------------------------------------------------------

POD1 = pod(
    "pod1",
    [ctr("foo", lim={"cpu": "10m", "memory": "1Gi"}), ctr("bar", lim={"cpu": "100m", "memory": "2Gi"})],
)
POD2 = pod("pod2", [ctr("foo", lim={"cpu": "20m", "memory": "2Gi"})])  # the seed's "2Gii" is a typo
POD3 = pod(
    "pod3",
    [
        ctr("foo", req={"cpu": "20m", "memory": "1Gi"}, lim={"cpu": "50m", "memory": "2Gi"}),
        ctr("bar", lim={"cpu": "100m", "memory": "1Gi"}),
    ],
)
POD4 = pod("pod4", [ctr("foo", req={"cpu": "10m", "memory": "1Gi"}, lim={"cpu": "20m", "memory": "2Gi"})])
POD5 = pod("pod5", [{"name": "foo", "resources": {}}, {"name": "bar", "resources": {}}])


@pytest.mark.parametrize(
    ("raw", "qos", "shares", "quota", "memory", "cgroup"),
    [
        # /ROOT/Pod1/cpu.quota = 110m, cpu.shares = 110m, memory = 3Gi
        (POD1, QOSClass.GUARANTEED, 112, 11000, 3 * GI, "/kubepods/poduid-pod1"),
        # /ROOT/Pod2: 20m, 20m, 2Gi
        (POD2, QOSClass.GUARANTEED, 20, 2000, 2 * GI, "/kubepods/poduid-pod2"),
        # /ROOT/burstable/Pod3: quota 150m, shares 120m (bar's request defaults to its limit), 3Gi
        (POD3, QOSClass.BURSTABLE, 122, 15000, 3 * GI, "/kubepods/burstable/poduid-pod3"),
        # /ROOT/burstable/Pod4: quota 20m, shares 10m, 2Gi
        (POD4, QOSClass.BURSTABLE, 10, 2000, 2 * GI, "/kubepods/burstable/poduid-pod4"),
        # /ROOT/besteffort/Pod5: shares 2, no memory limit
        (POD5, QOSClass.BEST_EFFORT, 2, None, None, "/kubepods/besteffort/poduid-pod5"),
    ],
    ids=[
        "seed002-pod1-guaranteed",
        "seed002-pod2-guaranteed",
        "seed002-pod3-burstable",
        "seed002-pod4-burstable",
        "seed002-pod5-besteffort",
    ],
)
def test_seed_002_pod_cgroups(raw, qos, shares, quota, memory, cgroup) -> None:
    comp = compute_pod(view(raw), ComputeConfig())
    assert comp.qos.qos is qos
    assert str(comp.cgroup) == cgroup
    assert comp.values.cpu_shares == shares
    assert comp.values.cpu_quota == quota
    assert comp.values.cpu_period == (100000 if quota else None)
    assert comp.values.memory_limit == memory


def test_seed_002_qos_tiers_with_full_reservation() -> None:
    allocatable = 32 * GI
    cfg = ComputeConfig(
        allocatable=Resources(cpu_milli=8000, memory=allocatable), qos_reserved_memory_percent=100
    )
    node = compute_node([view(p) for p in (POD1, POD2, POD3, POD4, POD5)], cfg)
    tiers = {t.kind.value: t.values for t in node.tiers}
    # /ROOT/burstable/cpu.shares = 130m (Pod3 120m + Pod4 10m)
    assert tiers["burstable"].cpu_shares == 133
    # /ROOT/burstable/memory.limit_in_bytes = Allocatable - 5Gi (Guaranteed requests 3Gi + 2Gi)
    assert tiers["burstable"].memory_limit == allocatable - 5 * GI
    # /ROOT/besteffort: the seed writes "Allocatable - 7Gi", but by its own rule bar's request defaults
    # to its 1Gi limit, so Burstable requests are 2Gi + 1Gi = 3Gi: Allocatable - 8Gi.
    assert tiers["besteffort"].memory_limit == allocatable - 8 * GI
    assert tiers["besteffort"].cpu_shares == 2
    assert tiers["kubepods"].cpu_shares == 8192
    assert tiers["kubepods"].memory_limit == allocatable


# ---- seed 001: the nginx pod and the IDE pod (pod-level limits) ------------------------------------


NGINX = pod(
    "nginx",
    [
        {"name": "envoy"},
        ctr("nginx", req={"memory": "128M", "cpu": "0.5"}, lim={"memory": "256M", "cpu": "1"}),
    ],
    pod_resources=res(lim={"memory": "384M", "cpu": "2"}),
)


def test_seed_001_nginx_pod_level_limits() -> None:
    comp = compute_pod(view(NGINX), ComputeConfig())
    # pod requests default to the containers' requests (0.5 CPU, 128M): not Guaranteed
    assert comp.qos.qos is QOSClass.BURSTABLE
    assert comp.values.cpu_shares == 512
    assert comp.values.cpu_quota == 200000  # pod: 2 cores
    assert comp.values.memory_limit == 384 * M  # pod: 384M
    assert comp.values.memory_reservation == 128 * M  # soft limit from the pod-level request
    by_name = {c.container.name: c for c in comp.containers}
    envoy, nginx = by_name["envoy"], by_name["nginx"]
    # envoy has no limits: it is bounded by the pod-level limit
    assert envoy.values.memory_limit == 384 * M and envoy.memory_limit_from_pod
    assert envoy.values.cpu_quota == 200000 and envoy.cpu_limit_from_pod
    assert envoy.values.cpu_shares == 2048  # no request: shares from the (pod-level) limit, the create path
    # nginx keeps its own: 256M and half of the pod's CPU quota
    assert nginx.values.memory_limit == 256 * M
    assert nginx.values.cpu_quota == 100000
    assert nginx.values.cpu_shares == 512


def test_seed_001_ide_story() -> None:
    ide = pod(
        "myide",
        [
            {"name": "shell"},
            {"name": "tool1"},
            {"name": "tool2"},
            ctr("ide", req={"memory": "128M", "cpu": "0.5"}, lim={"memory": "256M", "cpu": "1"}),
        ],
        pod_resources=res(lim={"memory": "1024M", "cpu": "4"}),
    )
    comp = compute_pod(view(ide), ComputeConfig())
    assert comp.values.cpu_quota == 400000
    assert comp.values.memory_limit == 1024 * M
    tools = [c for c in comp.containers if c.container.name.startswith("tool")]
    assert all(t.values.memory_limit == 1024 * M and t.values.cpu_quota == 400000 for t in tools)


def test_seed_001_guaranteed_by_pod_level_values() -> None:
    g = pod(
        "g",
        [{"name": "a"}, ctr("b", req={"cpu": "100m", "memory": "64Mi"})],
        pod_resources=res(req={"cpu": "1", "memory": "1Gi"}, lim={"cpu": "1", "memory": "1Gi"}),
    )
    comp = compute_pod(view(g), ComputeConfig())
    assert comp.qos.qos is QOSClass.GUARANTEED
    assert str(comp.cgroup) == "/kubepods/poduid-g"
    assert (comp.values.cpu_quota, comp.values.memory_limit) == (100000, GI)


def test_seed_001_pod_level_request_only_is_burstable() -> None:
    b = pod("b", [{"name": "a"}], pod_resources=res(req={"cpu": "500m"}))
    comp = compute_pod(view(b), ComputeConfig())
    assert comp.qos.qos is QOSClass.BURSTABLE
    assert comp.values.cpu_shares == 512
    assert comp.values.cpu_quota is None and comp.values.memory_limit is None


def test_seed_001_pod_limit_below_container_requests_is_an_error() -> None:
    from agent.core.compute import PodComputeError

    bad = pod(
        "bad",
        [ctr("a", req={"memory": "300M"}), ctr("b", req={"memory": "200M"})],
        pod_resources=res(lim={"memory": "384M"}),
    )
    with pytest.raises(
        PodComputeError,
        match=r"pod-level memory limit 384000000 bytes is below the sum of container requests 500000000",
    ):
        compute_pod(view(bad), ComputeConfig())
    node = compute_node([view(bad), view(POD1)], ComputeConfig())
    assert [e.pod for e in node.errors] == ["default/bad"]
    assert [p.pod.name for p in node.pods] == ["pod1"]  # the other pods are still computed


def test_seed_001_memory_limit_below_sum_of_container_limits_warns() -> None:
    w = pod(
        "w",
        [
            ctr("a", req={"memory": "100M"}, lim={"memory": "300M"}),
            ctr("b", req={"memory": "100M"}, lim={"memory": "300M"}),
        ],
        pod_resources=res(lim={"memory": "400M"}),
    )
    comp = compute_pod(view(w), ComputeConfig())
    assert comp.values.memory_limit == 400 * M
    assert any("below the sum of container memory limits" in x for x in comp.warnings)


def test_unlimited_is_minus_one_for_containers_without_limits() -> None:
    comp = compute_pod(view(POD5), ComputeConfig())
    assert {c.values.cpu_quota for c in comp.containers} == {UNLIMITED}
    assert {c.values.memory_limit for c in comp.containers} == {UNLIMITED}
