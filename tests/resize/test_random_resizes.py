"""Random multi-container resizes (CPU and memory, requests and limits, up and down) with failures
injected at random cgroup writes and random UpdateContainerResources calls: after every single write
no child exceeds its parent and no pod's containers sum above it; a newer desired state can arrive in
the middle; once the failures stop, the pod converges to the latest desired state."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.resize.test_matrix import assert_kubelet_values
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri


@st.composite
def container_state(draw: st.DrawFn, guaranteed: bool) -> dict[str, Any]:
    cpu = draw(st.integers(2, 20)) * 50  # 100m .. 1000m
    mem = draw(st.integers(2, 16)) * 32  # 64Mi .. 512Mi
    if guaranteed:
        return {"limits": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}}
    lcpu = cpu + draw(st.integers(1, 10)) * 50  # above the request: stays Burstable
    lmem = mem + draw(st.integers(0, 8)) * 32
    return {
        "requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"},
        "limits": {"cpu": f"{lcpu}m", "memory": f"{lmem}Mi"},
    }


@st.composite
def scenario(draw: st.DrawFn) -> dict[str, Any]:
    guaranteed = draw(st.booleans())
    names = [f"c{i}" for i in range(draw(st.integers(1, 3)))]
    pod_state = st.fixed_dictionaries({n: container_state(guaranteed) for n in names})
    return {
        "initial": draw(pod_state),
        "targets": draw(st.lists(pod_state, min_size=1, max_size=2)),
        "fail_writes": draw(st.sets(st.integers(0, 12), max_size=3)),
        "fail_updates": draw(st.sets(st.integers(0, 8), max_size=3)),
        "failing_passes": draw(st.integers(1, 3)),
    }


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_random_resizes_with_failures_keep_the_invariant_and_converge(sc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        with running_fake_cri(d) as cri:
            node = ResizeNode(FakeCgroupTree(d / "tree", "v1"), cri, d / "state")
            try:
                node.add_pod(
                    manifest(
                        "p",
                        [
                            ctr(n, req=r.get("requests"), lim=r.get("limits"))
                            for n, r in sc["initial"].items()
                        ],
                    )
                )
                eng = node.engine()
                eng.start(node.views())
                eng.reconcile()
                uid = node.view("p").uid
                for target in sc["targets"]:
                    # failures are armed relative to the calls made so far
                    node.fail_writes = {node.writes + i for i in sc["fail_writes"]}
                    node.fail_updates = {node.updates + i for i in sc["fail_updates"]}
                    node.resize("p", target)
                    for _ in range(sc["failing_passes"]):
                        eng.observe(node.views())
                        eng.reconcile()
                    assert node.violations == []
                node.fail_writes, node.fail_updates = set(), set()
                for _ in range(6):
                    eng.observe(node.views())
                    eng.reconcile()
                    status = eng.status(uid)
                    if status is None or status.state is ResizeState.DONE:
                        break
                status = eng.status(uid)
                # None: the targets equalled the start, so no resize was ever pending
                assert (status is None and sc["targets"][-1] == sc["initial"]) or (
                    status is not None and status.state is ResizeState.DONE
                ), status
                assert node.violations == []
                assert_kubelet_values(node, "p")  # the latest desired state, read back from the tree
                assert eng.snapshot(node.files).node.changes == ()
            finally:
                node.close()
