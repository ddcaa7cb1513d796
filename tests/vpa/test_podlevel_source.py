"""Pod-level VPA wired into the VPA source (agent/vpa/source.py, podlevel_source.py): a pod that sets
`spec.resources` is decided by decide_pod_level under the same gates; the new pod-level values are one
more target (named POD) that applied, pending, blocked, the retry rule and the state file keep as they
keep the containers'; on a bare node the real resize engine applies them, pod cgroup and containers, in
the kubelet's order."""

from __future__ import annotations

from typing import Any

from agent.core.model import Resources
from agent.pods.parse import parse_pod
from agent.resize.types import ResizeState
from agent.vpa.applied import ActuatorState, dumps, loads
from agent.vpa.model import VPA, Recommendation, UpdateMode
from agent.vpa.podlevel import PodBounds
from agent.vpa.policy import POD, ResizeBlock
from agent.vpa.source import VPASource
from tests.resize.harness import ResizeNode
from tests.resize.journal import assert_kubelet_order
from tests.resize.manifests import ctr, manifest
from tests.vpa.passes import until_done

MI = 1 << 20
KEY = "default/web-6d4f-x"
OWNERS = {("default", "ReplicaSet", "web-6d4f"): ("Deployment", "web")}
SHARED = {"requests": {"cpu": "200m", "memory": "400Mi"}, "limits": {"cpu": "400m", "memory": "800Mi"}}


def _pod(resources: dict[str, Any] | None = None, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Two containers without resources of their own, sharing one pod-level budget."""
    raw = manifest("web-6d4f-x", [ctr("app"), ctr("side")], resources=resources or SHARED)
    raw["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-6d4f", "controller": True}]
    raw["status"] = {"phase": "Running", "startTime": "2026-11-25T00:00:00Z", "conditions": conditions or []}
    return raw


def _vpa(app: tuple[int, int] = (600, 150), side: tuple[int, int] = (200, 50), **kw: Any) -> VPA:
    """app and side targets (millicores, MiB), bounds at half and double: summed, 800m/200Mi in
    [400m, 1600m] and [100Mi, 400Mi] by default — the pod's 200m is below, so the updater acts now."""
    recs = tuple(
        Recommendation(n, Resources(c, m * MI), Resources(c // 2, m * MI // 2), Resources(c * 2, m * MI * 2))
        for n, (c, m) in (("app", app), ("side", side))
    )
    return VPA("default", "web", "Deployment", "web", UpdateMode.IN_PLACE, opted_in=True, recommendations=recs, **kw)


def test_a_pod_level_pod_gets_its_spec_resources_from_the_vpa_with_provenance() -> None:
    src = VPASource((_vpa(),), OWNERS, now=lambda: 1e10)
    pod = parse_pod(_pod(), sources=(src,))
    # cpu 200m -> 800m, its limit in the pod's ratio 2: 1600m; memory 400Mi -> 200Mi, limit 400Mi
    assert pod.pod_requests == Resources(800, 200 * MI) and pod.pod_limits == Resources(1600, 400 * MI)
    assert pod.provenance["pod/requests/cpu"] == "vpa" and pod.provenance["pod/limits/memory"] == "vpa"
    assert all(not c.requests.has_cpu_or_memory() for c in pod.containers)  # containers never get any
    [(vpa, targets)] = src.applied.values()
    assert vpa == "default/web" and [t.container for t in targets] == [POD]


def test_the_gates_cover_the_pod_level_the_panic_button_and_the_opt_in() -> None:
    src = VPASource((_vpa(),), OWNERS, now=lambda: 1e10, enabled=False)
    assert parse_pod(_pod(), sources=(src,)).pod_requests == Resources(200, 400 * MI)
    assert "panic" in src.verdicts[KEY][1].reason
    v = _vpa()
    src = VPASource((VPA(v.namespace, v.name, v.target_kind, v.target_name, v.mode, recommendations=v.recommendations),),
                    OWNERS, now=lambda: 1e10)
    assert parse_pod(_pod(), sources=(src,)).pod_requests == Resources(200, 400 * MI)
    assert "opt in" in src.verdicts[KEY][1].reason


def test_limitrange_type_pod_bounds_come_from_the_source_and_cap_the_pod_level() -> None:
    # max cpu 1: the request whose proportional limit (ratio 2) is 1 core is 500m
    src = VPASource((_vpa(),), OWNERS, now=lambda: 1e10,
                    pod_bounds=lambda ns: PodBounds(max=Resources(1000, None)) if ns == "default" else None)
    pod = parse_pod(_pod(), sources=(src,))
    assert (pod.pod_requests, pod.pod_limits) == (Resources(500, 200 * MI), Resources(1000, 400 * MI))


def test_the_pod_target_is_kept_across_a_restart_and_a_refused_one_waits_for_a_lower_recommendation() -> None:
    src = VPASource((_vpa(),), OWNERS, now=lambda: 1e10, propose_changes=False)
    assert src.propose(_pod()) is None
    [(ns, name, vpa, targets)] = src.take_pending().values()
    assert (ns, name, [t.container for t in targets]) == ("default", "web-6d4f-x", [POD])
    src.sent_through_api("uid-web-6d4f-x", vpa, targets)
    asked = {"requests": {"cpu": "800m", "memory": str(200 * MI)}, "limits": {"cpu": "1600m", "memory": str(400 * MI)}}
    pending = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "no room"}]
    src.propose(_pod(asked, pending))  # the kubelet wrote the new spec and refused it
    blocked = src.blocked["uid-web-6d4f-x"]
    assert blocked.state is ResizeBlock.INFEASIBLE and blocked.targets == targets
    again = loads(dumps(ActuatorState({"uid-web-6d4f-x": (vpa, targets)}, dict(src.blocked))))
    assert again.blocked == src.blocked and again.applied["uid-web-6d4f-x"] == (vpa, targets)
    src.vpas = (_vpa((900, 150), (300, 50)),)  # higher: held back
    src.propose(_pod(asked, pending))
    assert src.take_pending() == {} and "lowers" in src.verdicts[KEY][1].reason
    src.vpas = (_vpa((250, 150), (50, 50)),)  # lower (300m, outside [400m, ...] of the 800m asked): sent
    src.propose(_pod(asked, pending))
    [(_, _, _, lower)] = src.take_pending().values()
    assert lower[0].container == POD and lower[0].requests.cpu_milli == 300


def test_a_pod_level_target_is_applied_in_place_on_a_bare_node_in_the_kubelets_order(node: ResizeNode) -> None:
    """The engine writes the pod cgroup and the containers (which inherit the pod-level limits): the CPU
    limit grows 400m -> 1600m (the pod's quota before the containers'), the memory limit shrinks 800Mi
    -> 400Mi (the containers' before the pod's); memory's phase before CPU's; nothing restarted."""
    raw = _pod()
    del raw["status"]
    node.add_pod(raw)
    src = VPASource((), OWNERS, now=lambda: 1e10)

    def view() -> Any:
        return parse_pod(node.raw("web-6d4f-x"), sources=(src,))

    eng = node.engine()
    eng.start([view()])
    eng.reconcile()
    quota, memory = node.pod_path("web-6d4f-x", "cpu.cfs_quota_us"), node.pod_path("web-6d4f-x", "memory.limit_in_bytes")
    app_quota = node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")
    assert (node.read(quota), node.read(memory), node.read(app_quota)) == ("40000", str(800 * MI), "40000")

    src.vpas = (_vpa(),)
    start = len(node.events)
    assert until_done(eng, view) is ResizeState.DONE
    assert (node.read(quota), node.read(memory)) == ("160000", str(400 * MI))
    assert node.read(node.pod_path("web-6d4f-x", "cpu.shares")) == "819"  # 800m
    for c in ("app", "side"):
        assert node.read(node.container_path("web-6d4f-x", c, "cpu.cfs_quota_us")) == "160000"
        assert node.read(node.container_path("web-6d4f-x", c, "memory.limit_in_bytes")) == str(400 * MI)
    sigs = assert_kubelet_order(node.events[start:])
    assert ("pod", "cpu", 1) in sigs and ("pod", "memory", -1) in sigs
    assert node.cri.service.calls_of("StopContainer") == []
    assert node.violations == []
