"""Seed 000's E2E matrix against the fake CRI server and a strict fake tree: the order of the agent's
cgroup writes and the runtime's container updates, no intermediate state outside the invariant, and
the final values read back from the kernel equal to the kubelet's for the new spec."""

from __future__ import annotations

from typing import Any

import pytest

from agent.core.compute import compute_pod
from agent.resize.engine import ResizeEngine
from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.journal import assert_kubelet_order
from tests.resize.kubelet import kubelet_mismatches
from tests.resize.manifests import MI, ctr, manifest
from tests.resize.matrix import MATRIX


def settle(node: ResizeNode, eng: ResizeEngine, pod: str, rounds: int = 4) -> ResizeState | None:
    uid = node.view(pod).uid
    state = None
    for _ in range(rounds):
        eng.observe(node.views())
        eng.reconcile()
        st = eng.status(uid)
        state = st.state if st is not None else None
        if state in (ResizeState.DONE, ResizeState.INFEASIBLE, ResizeState.DEFERRED):
            break
    return state


def start(node: ResizeNode, name: str, containers: dict[str, Any], **spec: Any) -> ResizeEngine:
    node.add_pod(manifest(name, [ctr(n, **_rl(r)) for n, r in containers.items()], **spec))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    assert eng.snapshot(node.files).node.changes == ()
    node.events.clear()
    return eng


def _rl(r: dict[str, Any]) -> dict[str, Any]:
    return {"req": r.get("requests"), "lim": r.get("limits")}


def kubelet_values(node: ResizeNode, pod: str) -> tuple[object, ...]:
    view = node.view(pod)
    cfg = node.settings.compute_config(())
    comp = compute_pod(view, cfg)
    v = comp.values
    return (v.cpu_shares, v.cpu_quota, v.memory_limit, *(cc.values for cc in comp.containers))


def assert_kubelet_values(node: ResizeNode, pod: str) -> None:
    """Every pod and container file as the kubelet would have it for the current spec."""
    assert kubelet_mismatches(node, pod) == []


@pytest.mark.parametrize(("case_id", "initial", "resizes"), MATRIX, ids=[c[0] for c in MATRIX])
def test_seed_000_matrix(node: ResizeNode, case_id: str, initial: dict[str, Any], resizes: list[Any]) -> None:
    eng = start(node, "p", initial)
    for step in resizes:
        node.events.clear()
        before = kubelet_values(node, "p")
        node.resize("p", step)
        assert settle(node, eng, "p") is ResizeState.DONE, eng.status(node.view("p").uid)
        sigs = assert_kubelet_order(node.events)
        # a memory-request-only change moves no kernel value (the kubelet writes no soft limit)
        assert bool(sigs) == (kubelet_values(node, "p") != before)
        assert not any(s[1] == "restart" for s in sigs)  # NotRequired: never a restart
        assert node.violations == []
        assert_kubelet_values(node, "p")
        assert eng.snapshot(node.files).node.changes == ()


def test_guaranteed_cpu_increase_exact_order(node: ResizeNode) -> None:
    """Pod grows first (shares then quota), then the container; nothing in memory."""
    eng = start(node, "p", {"app": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    assert settle(node, eng, "p") is ResizeState.DONE
    assert [
        (e.kind, e.target.rsplit("/", 1)[-1], e.value if e.kind == "write" else None) for e in node.events
    ] == [
        ("write", "cpu.shares", "1024"),
        ("write", "cpu.cfs_quota_us", "100000"),
        ("update", "app", None),
    ]


def test_three_containers_net_decrease_exact_order(node: ResizeNode) -> None:
    """Memory phase: c2 and c3 shrink, then the pod, then c1 grows; each a full UpdateContainerResources."""
    g = {"limits": {"cpu": "300m", "memory": "128Mi"}}
    eng = start(node, "p", {"c1": g, "c2": g, "c3": g})
    node.resize(
        "p",
        {
            "c1": {"limits": {"cpu": "300m", "memory": "192Mi"}},
            "c2": {"limits": {"cpu": "300m", "memory": "64Mi"}},
            "c3": {"limits": {"cpu": "300m", "memory": "64Mi"}},
        },
    )
    assert settle(node, eng, "p") is ResizeState.DONE
    order = [e.target.rsplit("/", 1)[-1] for e in node.events]
    assert order == ["c2", "c3", "memory.limit_in_bytes", "c1"]
    assert node.read(node.pod_path("p", "memory.limit_in_bytes")) == str(320 * MI)
    calls = node.cri.service.calls_of("UpdateContainerResources")
    assert [c.request["linux"]["memory_limit_in_bytes"] for c in calls[-3:]] == [
        str(64 * MI),
        str(64 * MI),
        str(192 * MI),
    ]
    assert node.violations == []


def test_matrix_case_ids_cover_the_seed() -> None:
    ids = {c[0] for c in MATRIX}
    assert len(ids) == len(MATRIX) == 38
    assert {i.split("-")[0] for i in ids} == {"guaranteed", "burstable", "cpu", "memory", "three"}
