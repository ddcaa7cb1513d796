"""The VPA source: which VPA controls a pod (owner chain, conflicts), what it proposes through the sources
seam, that an applied target is kept (no resize back, the panic button touches nothing applied), and the
real resize engine applying a changed recommendation in place on a bare node."""

from __future__ import annotations

from typing import Any

from agent.core.model import Resources
from agent.pods.parse import parse_pod
from agent.resize.types import ResizeState
from agent.vpa.model import VPA, Recommendation, UpdateMode
from agent.vpa.policy import Options
from agent.vpa.source import VPASource, owner_chain, resolve
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.vpa.passes import until_done
from tests.vpa.pods import vpa_pod

MI = 1 << 20
OWNERS = {("shop", "ReplicaSet", "web-6d4f"): ("Deployment", "web")}


def _vpa(kind: str = "Deployment", name: str = "web", ns: str = "shop", cpu: int = 300, lower: int = 200, **kw: Any) -> VPA:
    rec = Recommendation("app", Resources(cpu, 100 * MI), Resources(lower, 50 * MI), Resources(cpu + 100, 200 * MI))
    return VPA(ns, f"vpa-{name}-{kind.lower()}", kind, name, UpdateMode.IN_PLACE, opted_in=True, recommendations=(rec,), **kw)


def test_the_owner_chain_and_the_vpa_that_controls_a_pod() -> None:
    chain = owner_chain("shop", ("ReplicaSet", "web-6d4f"), OWNERS)
    assert chain == (("ReplicaSet", "web-6d4f"), ("Deployment", "web"))
    assert resolve("shop", chain, [_vpa()]).vpa == _vpa()
    assert resolve("shop", (("StatefulSet", "db"),), [_vpa("StatefulSet", "db")]).vpa is not None
    assert resolve("other", chain, [_vpa()]).vpa is None  # a VPA acts in its own namespace only
    two = resolve("shop", chain, [_vpa(), _vpa("ReplicaSet", "web-6d4f")])
    assert two.vpa is None and two.conflict == ("shop/vpa-web-6d4f-replicaset", "shop/vpa-web-deployment")
    loop = {("shop", "A", "a"): ("B", "b"), ("shop", "B", "b"): ("A", "a")}
    assert owner_chain("shop", ("A", "a"), loop) == (("A", "a"), ("B", "b"))  # a cycle ends


def test_a_recommendation_is_a_source_with_its_provenance() -> None:
    src = VPASource((_vpa(),), OWNERS, now=lambda: 1e10)
    pod = parse_pod(vpa_pod(), sources=(src,))
    c = pod.containers[0]
    # 100m -> 300m (outside [200m, 400m]); the limit keeps its ratio 2: 600m; memory 100Mi already inside
    assert (c.requests.cpu_milli, c.limits.cpu_milli) == (300, 600)
    assert pod.provenance["containers/app/requests/cpu"] == "vpa"
    assert src.verdicts["shop/web-6d4f-x"][1].apply


def test_an_applied_target_is_kept_and_the_panic_button_touches_nothing_applied() -> None:
    src = VPASource((_vpa(),), OWNERS, now=lambda: 1e10)
    parse_pod(vpa_pod(), sources=(src,))
    # a recommendation the updater would not act on (inside the bounds, change < 10 %): the pod is not
    # resized back to its spec; the applied target stays
    src.vpas = (_vpa(cpu=105, lower=50),)
    c = parse_pod(vpa_pod(), sources=(src,)).containers[0]
    assert c.requests.cpu_milli == 300 and "below" in src.verdicts["shop/web-6d4f-x"][1].reason
    src.enabled = False  # the panic button
    src.vpas = (_vpa(cpu=900, lower=800),)
    c = parse_pod(vpa_pod(), sources=(src,)).containers[0]
    assert c.requests.cpu_milli == 300 and "panic" in src.verdicts["shop/web-6d4f-x"][1].reason
    src.enabled = True  # released: the held-back recommendation applies
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 900


def test_two_vpas_leave_the_pod_alone_and_say_so() -> None:
    src = VPASource((_vpa(), _vpa("ReplicaSet", "web-6d4f")), OWNERS, now=lambda: 1e10)
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 100
    assert src.conflicts["shop/web-6d4f-x"] == ("shop/vpa-web-6d4f-replicaset", "shop/vpa-web-deployment")


def test_a_vpa_that_does_not_opt_in_changes_nothing() -> None:
    v = _vpa()
    src = VPASource((VPA(v.namespace, v.name, v.target_kind, v.target_name, v.mode, recommendations=v.recommendations),), OWNERS, now=lambda: 1e10)
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 100
    assert "opt in" in src.verdicts["shop/web-6d4f-x"][1].reason
    src.opts = Options(actuate_all=True)
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 300




def test_the_engine_applies_a_changed_recommendation_in_place(node: ResizeNode) -> None:
    raw = manifest("web", [ctr("app", req={"cpu": "100m", "memory": "100Mi"}, lim={"cpu": "200m", "memory": "200Mi"})])
    raw["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-6d4f", "controller": True}]
    node.add_pod(raw)
    src = VPASource((), {("default", "ReplicaSet", "web-6d4f"): ("Deployment", "web")}, now=lambda: 1e10)

    def view() -> Any:
        return parse_pod(node.raw("web"), sources=(src,))

    eng = node.engine()
    eng.start([view()])
    eng.reconcile()
    quota = node.container_path("web", "app", "cpu.cfs_quota_us")
    assert node.read(quota) == "20000"

    src.vpas = (_vpa(ns="default", cpu=300),)  # the recommendation arrives: 300m, limit 600m
    assert until_done(eng, view) is ResizeState.DONE
    assert node.read(quota) == "60000"
    assert node.read(node.container_path("web", "app", "cpu.shares")) == "307"
    assert node.cri.service.calls_of("StopContainer") == []  # in place: nothing restarted
    assert node.violations == []


def test_a_quick_oom_seen_in_the_pod_status_acts_at_once() -> None:
    """Young pod, request inside the bounds: the updater waits; a container OOM-killed 2 minutes after it
    started (< 10 min, EvictAfterOOMThreshold) makes it act now. 100Mi -> 150Mi memory."""
    start = 1_764_028_800.0  # 2025-11-25T00:00:00Z
    raw = vpa_pod()
    raw["status"]["containerStatuses"] = [{"name": "app", "lastState": {}}]
    v = VPA("shop", "v", "Deployment", "web", UpdateMode.IN_PLACE, opted_in=True, recommendations=(
        Recommendation("app", Resources(100, 150 * MI), Resources(50, 50 * MI), Resources(400, 300 * MI)),))
    src = VPASource((v,), OWNERS, now=lambda: start + 3600)
    raw["status"]["startTime"] = "2025-11-25T00:00:00Z"
    assert parse_pod(raw, sources=(src,)).containers[0].requests.memory == 100 * MI
    assert "younger" in src.verdicts["shop/web-6d4f-x"][1].reason
    raw["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"reason": "OOMKilled", "startedAt": "2025-11-25T00:10:00Z", "finishedAt": "2025-11-25T00:12:00Z"}
    }
    c = parse_pod(raw, sources=(src,)).containers[0]
    assert (c.requests.memory, c.limits.memory) == (150 * MI, 300 * MI)  # the limit keeps its ratio 2
    assert src.verdicts["shop/web-6d4f-x"][1].reason == "quick OOM"


def test_what_is_kept_about_a_pod_goes_when_it_leaves() -> None:
    src = VPASource((_vpa(), _vpa("ReplicaSet", "web-6d4f")), OWNERS, now=lambda: 1e10, usage={"shop/web-6d4f-x": {"app": 1}})
    parse_pod(vpa_pod(), sources=(src,))  # a conflict is kept
    src.vpas = (_vpa(),)
    parse_pod(vpa_pod(), sources=(src,))  # applied and decided
    assert src.applied and src.verdicts and src.usage
    src.prune({"uid-web"}, {"shop/web-6d4f-x"})
    assert src.applied and src.verdicts  # still here: kept
    src.prune(set(), set())
    assert not src.applied and not src.verdicts and not src.conflicts and src.usage == {}
