from __future__ import annotations

from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest


def test_guaranteed_cpu_increase(node: ResizeNode) -> None:
    node.add_pod(manifest("g1", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    r = eng.reconcile()
    print(r.plan().steps, r.errors)
    node.events.clear()
    node.resize("g1", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    eng.observe(node.views())
    r = eng.reconcile()
    for e in node.events:
        print(e)
    print(eng.statuses())
    assert node.violations == []
    st = eng.status(node.view("g1").uid)
    assert st is not None and st.state is ResizeState.DONE


def test_a_container_without_an_id_yet_is_left_to_its_creation_and_converged_once_it_has_one(
    node: ResizeNode,
) -> None:
    """A container the status names without an ID (not started yet, or between restarts) gets its
    values from the spec when the runtime creates it: the resize does the pod and the other containers
    and is Done; once the status gives an ID, the next pass converges that container too."""
    from agent.pods.parse import parse_pod

    node.add_pod(manifest("p", [ctr(n, lim={"cpu": "300m", "memory": "128Mi"}) for n in ("c1", "c2")]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize("p", {n: {"limits": {"cpu": "500m", "memory": "256Mi"}} for n in ("c1", "c2")})
    raw = node.raw("p")
    raw["status"]["containerStatuses"][1].pop("containerID")
    raw["status"]["containerStatuses"][1]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    eng.update(parse_pod(raw))
    eng.reconcile()
    status = eng.status(node.view("p").uid)
    assert status is not None and status.state is ResizeState.DONE
    updated = {c.request["container_id"] for c in node.cri.service.calls_of("UpdateContainerResources")}
    assert node.pods["p"].containers["c2"] not in updated  # nothing sent for the container without an ID
    assert node.read(node.pod_path("p", "cpu.cfs_quota_us")) == "100000"
    assert [m.split("/")[-1] for m in node.mismatches("p")] == [
        "cpu.shares: 307 != 512", "cpu.cfs_quota_us: 30000 != 50000", "memory.limit_in_bytes: 134217728 != 268435456"
    ]  # c2 only, still at its old values
    eng.update(node.view("p"))  # the status names its ID again
    eng.reconcile(full=False)
    assert node.mismatches("p") == [] and node.violations == []
