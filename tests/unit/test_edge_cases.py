"""Edge cases of anchors §1: sidecars and init containers, overhead, hugepages, pod-level overrides and
qos-reserved — each a named case with the kubelet's expected value (conversions: test_edge_conversions)."""

from __future__ import annotations

import pytest

from agent.core.compute import ComputeConfig, compute_node, compute_pod
from agent.core.compute.aggregate import pod_limits, pod_requests
from agent.core.model import Resources
from tests.unit.podbuild import ctr, pod, res, view

MI = 1024**2
GI = 1024**3
H2M = 2 * MI
H1G = GI


# ---- init containers and sidecars ---------------------------------------------------------------


def _sidecar(name: str, cpu: str, mem: str) -> dict[str, object]:
    return ctr(name, req={"cpu": cpu, "memory": mem}, lim={"cpu": cpu, "memory": mem}, restartPolicy="Always")


@pytest.mark.parametrize(
    ("init", "cpu", "memory"),
    [
        # regular init bigger than the running pod: the init phase wins
        ([ctr("init", req={"cpu": "2", "memory": "1Gi"})], 2000, GI),
        # sidecar before a regular init: init phase = init + sidecar; running = app + sidecar
        ([_sidecar("sc", "200m", "100Mi"), ctr("init", req={"cpu": "1", "memory": "50Mi"})], 1200, 300 * MI),
        # sidecar after a regular init: the init runs alone, the sidecar only adds to the running sum
        ([ctr("init", req={"cpu": "1", "memory": "50Mi"}), _sidecar("sc", "200m", "100Mi")], 1000, 300 * MI),
        # two sidecars: the second init phase sees both
        (
            [
                _sidecar("a", "100m", "10Mi"),
                _sidecar("b", "100m", "10Mi"),
                ctr("i", req={"cpu": "100m", "memory": "10Mi"}),
            ],
            700,
            220 * MI,
        ),
    ],
    ids=["init-dominates", "sidecar-before-init", "sidecar-after-init", "two-sidecars"],
)
def test_init_and_sidecar_aggregation(init: list[dict[str, object]], cpu: int, memory: int) -> None:
    p = view(pod("p", [ctr("app", req={"cpu": "500m", "memory": "200Mi"})], init=init))
    r = pod_requests(p)
    assert (r.cpu_milli, r.memory) == (cpu, memory)


def test_sidecar_gets_container_values_and_regular_init_does_not() -> None:
    p = view(
        pod(
            "p",
            [ctr("app", lim={"cpu": "1", "memory": "1Gi"})],
            init=[_sidecar("sc", "100m", "64Mi"), ctr("i", lim={"cpu": "1", "memory": "1Gi"})],
        )
    )
    comp = compute_pod(p, ComputeConfig())
    assert {c.container.name for c in comp.containers} == {"sc", "app"}
    assert comp.qos.qos.value == "Guaranteed"
    assert comp.values.cpu_quota == 110000  # max(app 1 + sc 0.1, init 1 + sc 0.1)


def test_burstable_quota_only_when_every_container_declares_cpu_limit() -> None:
    partial = view(
        pod(
            "p",
            [
                ctr("a", req={"cpu": "100m"}, lim={"cpu": "1", "memory": "1Gi"}),
                ctr("b", req={"cpu": "100m"}, lim={"memory": "1Gi"}),
            ],
        )
    )
    comp = compute_pod(partial, ComputeConfig())
    assert comp.values.cpu_quota is None  # b has no CPU limit
    assert comp.values.memory_limit == 2 * GI  # both have memory limits


def test_sidecar_limit_counts_for_a_later_init_without_one() -> None:
    # kubelet ContainerFn: an init container without a CPU limit combined with a limited sidecar before
    # it still "declares" a CPU limit (the combined list is non-zero)
    p = view(
        pod(
            "p",
            [ctr("app", req={"cpu": "100m"}, lim={"cpu": "500m"})],
            init=[
                ctr("sc", req={"cpu": "100m"}, lim={"cpu": "200m"}, restartPolicy="Always"),
                ctr("i", req={"cpu": "100m"}),
            ],
        )
    )
    assert compute_pod(p, ComputeConfig()).cpu_limits_declared is True


# ---- overhead --------------------------------------------------------------------------------------


def test_overhead_with_limits_is_added_to_requests_and_limits() -> None:
    p = view(
        pod("p", [ctr("a", lim={"cpu": "1", "memory": "1Gi"})], overhead={"cpu": "250m", "memory": "120Mi"})
    )
    comp = compute_pod(p, ComputeConfig())
    assert (comp.requests.cpu_milli, comp.requests.memory) == (1250, GI + 120 * MI)
    assert (comp.limits.cpu_milli, comp.limits.memory) == (1250, GI + 120 * MI)
    assert comp.values.cpu_quota == 125000 and comp.values.cpu_shares == 1280
    assert comp.values.memory_limit == GI + 120 * MI


def test_overhead_without_limits_only_adds_to_requests() -> None:
    p = view(
        pod(
            "p",
            [ctr("a", req={"cpu": "100m", "memory": "100Mi"})],
            overhead={"cpu": "250m", "memory": "120Mi"},
        )
    )
    comp = compute_pod(p, ComputeConfig())
    assert comp.requests.cpu_milli == 350
    assert comp.limits.cpu_milli is None and comp.limits.memory is None
    assert comp.values.cpu_quota is None and comp.values.memory_limit is None
    assert comp.values.cpu_shares == 358


def test_overhead_on_besteffort_pod_makes_it_count_but_not_its_class() -> None:
    p = view(pod("p", [{"name": "a"}], overhead={"cpu": "100m"}))
    comp = compute_pod(p, ComputeConfig())
    assert comp.qos.qos.value == "BestEffort"
    assert comp.values.cpu_shares == 2
    assert pod_limits(p).cpu_milli is None


# ---- hugepages --------------------------------------------------------------------------------------


def test_hugepages_from_requests_and_unrequested_sizes_zero() -> None:
    p = view(pod("p", [ctr("a", lim={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "128Mi"})]))
    comp = compute_pod(p, ComputeConfig(hugepage_sizes=(H2M, H1G)))
    assert dict(comp.values.hugetlb) == {H2M: 128 * MI, H1G: 0}
    (c,) = comp.containers
    assert [(h.page_size, h.limit) for h in c.values.hugepage_limits] == [(H2M, 128 * MI), (H1G, 0)]


def test_hugepage_tiers_unbounded_kubepods_too() -> None:
    # the kubelet's node-allocatable enforcement writes kubepods' huge pages from allocatable once, then its
    # QoS pass, for which kubepods is the Guaranteed tier, sets all three unbounded (setHugePagesUnbounded)
    # at every run: a v1.36 kubelet on cgroup v2 put 4611686018427387904 back on kubepods.slice within 30 s
    cfg = ComputeConfig(hugepage_sizes=(H2M, H1G), allocatable=Resources(4000, 8 * GI, {H2M: 512 * MI}))
    node = compute_node([], cfg)
    tiers = {t.kind.value: dict(t.values.hugetlb) for t in node.tiers}
    assert tiers["burstable"] == {H2M: 1 << 62, H1G: 1 << 62}
    assert tiers["besteffort"] == {H2M: 1 << 62, H1G: 1 << 62}
    assert tiers["kubepods"] == {H2M: 1 << 62, H1G: 1 << 62}


def test_pod_level_hugepages_override_and_default() -> None:
    p = view(
        pod(
            "p",
            [ctr("a", lim={"hugepages-2Mi": "64Mi", "memory": "100Mi", "cpu": "100m"})],
            pod_resources=res(req={"cpu": "1"}),
        )
    )
    # defaultHugePagePodLimits: pod limits get the containers' hugepages; requests follow them
    assert p.pod_limits is not None and dict(p.pod_limits.hugepages) == {H2M: 64 * MI}
    assert p.pod_requests is not None and dict(p.pod_requests.hugepages) == {H2M: 64 * MI}


# ---- pod-level defaulting ------------------------------------------------------------------------------


def test_pod_level_requests_default_from_limits_when_no_container_requests() -> None:
    p = view(pod("p", [{"name": "a"}], pod_resources=res(lim={"cpu": "1", "memory": "1Gi"})))
    assert p.pod_requests == Resources(1000, GI)
    assert compute_pod(p, ComputeConfig()).qos.qos.value == "Guaranteed"


def test_pod_level_limits_default_from_containers_when_all_have_limits() -> None:
    p = view(
        pod(
            "p",
            [ctr("a", lim={"cpu": "1"}), ctr("b", lim={"cpu": "500m"})],
            pod_resources=res(req={"cpu": "2"}),
        )
    )
    assert p.pod_limits is not None and p.pod_limits.cpu_milli == 1500
    assert p.pod_limits.memory is None


def test_pod_level_annotation_for_older_apis() -> None:
    raw = pod("p", [{"name": "a"}])
    raw["metadata"]["annotations"] = {
        "kube-cgroup-agent.io/pod-resources": '{"limits": {"cpu": "2", "memory": "1Gi"}}'
    }
    p = view(raw)
    assert p.pod_level_source == "pod-resources-annotation"
    comp = compute_pod(p, ComputeConfig())
    assert (comp.values.cpu_quota, comp.values.memory_limit) == (200000, GI)


# ---- qos-reserved -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("percent", "burstable", "besteffort"),
    [
        (0, 16 * GI, 16 * GI),
        (50, 16 * GI - GI, 16 * GI - GI - 256 * MI),
        (100, 14 * GI, 14 * GI - 512 * MI),
        (None, None, None),
    ],
    ids=["0%", "50%", "100%", "not-set"],
)
def test_qos_reserved(percent: int | None, burstable: int | None, besteffort: int | None) -> None:
    pods = [
        view(pod("g", [ctr("a", lim={"cpu": "1", "memory": "2Gi"})])),
        view(pod("b", [ctr("a", req={"cpu": "1", "memory": "512Mi"})])),
        view(pod("e", [{"name": "a"}])),
    ]
    cfg = ComputeConfig(allocatable=Resources(4000, 16 * GI), qos_reserved_memory_percent=percent)
    tiers = {t.kind.value: t.values for t in compute_node(pods, cfg).tiers}
    assert tiers["burstable"].memory_limit == burstable
    assert tiers["besteffort"].memory_limit == besteffort
    assert tiers["burstable"].cpu_shares == 1024


def test_qos_reserved_truncates_like_integer_go() -> None:
    pods = [view(pod("g", [ctr("a", lim={"cpu": "1", "memory": "3"})]))]  # 3 bytes
    cfg = ComputeConfig(allocatable=Resources(4000, 1000), qos_reserved_memory_percent=50)
    tiers = {t.kind.value: t.values for t in compute_node(pods, cfg).tiers}
    assert tiers["burstable"].memory_limit == 1000 - 1  # 3*50/100 = 1 in integer arithmetic


# ---- misc kubelet rules ---------------------------------------------------------------------------------


def test_cfs_quota_disabled_means_unlimited() -> None:
    p = view(pod("p", [ctr("a", lim={"cpu": "1", "memory": "1Gi"})]))
    comp = compute_pod(p, ComputeConfig(cpu_cfs_quota=False))
    assert comp.values.cpu_quota == -1
    assert comp.containers[0].values.cpu_quota == -1


def test_status_qos_class_is_trusted_like_the_kubelet() -> None:
    raw = pod("p", [ctr("a", lim={"cpu": "1", "memory": "1Gi"})])
    raw["status"] = {"qosClass": "Burstable"}
    comp = compute_pod(view(raw), ComputeConfig())
    assert comp.qos.qos.value == "Burstable"
    assert any("status.qosClass" in w for w in comp.warnings)


def test_terminal_pods_are_left_out() -> None:
    raw = pod("p", [ctr("a", req={"cpu": "1"})])
    raw["status"] = {"phase": "Succeeded"}
    node = compute_node([view(raw)], ComputeConfig())
    assert node.pods == ()
    assert {t.kind.value: t.values.cpu_shares for t in node.tiers}["burstable"] == 2


def test_guaranteed_and_besteffort_containers_make_a_burstable_pod() -> None:
    p = view(pod("p", [ctr("a", lim={"cpu": "1", "memory": "1Gi"}), {"name": "b"}]))
    assert compute_pod(p, ComputeConfig()).qos.qos.value == "Burstable"
