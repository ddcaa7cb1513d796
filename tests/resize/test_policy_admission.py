"""Resize policy (RestartContainer), admission (Deferred, Infeasible, capacity freed), the memory-usage
guard and its step-down option, the resize annotation, and failure backoff — against the fake CRI server
and the strict fake tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.journal import assert_kubelet_order
from tests.resize.manifests import MI, ctr, manifest, policy
from tests.resize.test_matrix import assert_kubelet_values, settle, start
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import FakeCRI

G = {"limits": {"cpu": "500m", "memory": "256Mi"}}
BIG = {"limits": {"cpu": "1", "memory": "512Mi"}}


def two(node: ResizeNode, c1: dict[str, Any] | None = None, c2: dict[str, Any] | None = None) -> Any:
    node.add_pod(
        manifest(
            "p",
            [
                ctr("c1", lim=G["limits"], **({"resizePolicy": c1} if c1 else {})),
                ctr("c2", lim=G["limits"], **({"resizePolicy": c2} if c2 else {})),
            ],
        )
    )
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.events.clear()
    return eng


def stops(node: ResizeNode) -> list[str]:
    return [e.target for e in node.events if e.kind == "stop"]


# ---- resize policy (seed 000 "Resize Policy Tests")


def test_no_policy_resizes_without_restart(node: ResizeNode) -> None:
    eng = two(node)
    node.resize("p", {"c1": BIG, "c2": BIG})
    assert settle(node, eng, "p") is ResizeState.DONE
    assert stops(node) == [] and node.cri.service.calls_of("StopContainer") == []
    assert_kubelet_values(node, "p")
    assert node.violations == []


def test_restart_policy_restarts_only_that_container(node: ResizeNode) -> None:
    eng = two(node, policy(), policy("RestartContainer", "RestartContainer"))
    old_c1, old_c2 = node.pods["p"].containers["c1"], node.pods["p"].containers["c2"]
    node.resize("p", {"c1": BIG, "c2": BIG})
    assert settle(node, eng, "p") is ResizeState.DONE
    assert stops(node) == ["p/c2"]
    assert [c.request["container_id"] for c in node.cri.service.calls_of("StopContainer")] == [old_c2]
    updated = {c.request["container_id"] for c in node.cri.service.calls_of("UpdateContainerResources")}
    assert old_c1 in updated and old_c2 not in updated  # c2 is never resized in place
    assert node.pods["p"].containers["c1"] == old_c1  # c1 kept running, the pod was not recreated
    assert node.pods["p"].containers["c2"] != old_c2
    assert len(node.cri.service.sandboxes) == 1
    assert_kubelet_values(node, "p")  # the restarted c2 has its new values
    # the pod grew (both resources) before the stop, so the new c2 started inside a large enough pod
    sigs = assert_kubelet_order(node.events, phases=False)
    stop_at = sigs.index(("stop:c2", "restart", 0))
    assert all(i < stop_at for i, s in enumerate(sigs) if s[0] == "pod" and s[2] > 0)
    assert node.violations == []


@pytest.mark.parametrize(
    ("change", "restarted"),
    [
        ({"limits": {"cpu": "1", "memory": "256Mi"}}, False),  # cpu only: NotRequired
        ({"limits": {"cpu": "500m", "memory": "512Mi"}}, True),  # memory only: RestartContainer
        ({"limits": {"cpu": "1", "memory": "512Mi"}}, True),  # both: RestartContainer wins
    ],
    ids=["cpu-only-no-restart", "memory-only-restart", "both-restart-wins"],
)
def test_mixed_policy(node: ResizeNode, change: dict[str, Any], restarted: bool) -> None:
    eng = two(node, policy("NotRequired", "RestartContainer"))
    node.resize("p", {"c1": change})
    assert settle(node, eng, "p") is ResizeState.DONE
    assert stops(node) == (["p/c1"] if restarted else [])
    assert_kubelet_values(node, "p")
    assert node.violations == []


def test_restart_on_a_bare_node_waits_for_the_container(node: ResizeNode) -> None:
    """Nobody starts the stopped container: the resize stays InProgress, and it is not stopped twice."""
    node.restart_on_stop = False
    eng = two(node, policy("RestartContainer", "RestartContainer"))
    node.resize("p", {"c1": BIG})
    assert settle(node, eng, "p") is ResizeState.IN_PROGRESS
    st = eng.status(node.view("p").uid)
    assert st is not None and st.reason == "WaitingForRestart" and "c1" in st.message
    assert len(node.cri.service.calls_of("StopContainer")) == 1


def test_restart_plan_shows_the_restart_step(node: ResizeNode) -> None:
    eng = two(node, policy(), policy("RestartContainer", "NotRequired"))
    node.resize("p", {"c2": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    eng.observe(node.views())
    steps = eng.dry_run().plan().steps
    assert [s.to_json()["kind"] for s in steps][-1] == "restart"
    assert node.events == []  # a dry run writes nothing


# ---- admission


def test_deferred_until_another_pod_leaves(node: ResizeNode) -> None:
    node.set_allocatable("cpu=2,memory=2Gi")
    node.add_pod(manifest("a", [ctr("app", lim={"cpu": "1", "memory": "512Mi"})]))
    node.add_pod(manifest("b", [ctr("app", lim={"cpu": "500m", "memory": "512Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize("a", {"app": {"limits": {"cpu": "1600m", "memory": "512Mi"}}})
    assert settle(node, eng, "a") is ResizeState.DEFERRED
    st = eng.status(node.view("a").uid)
    assert st is not None and st.reason == "InsufficientCapacity" and "cpu" in st.message
    assert node.read(node.pod_path("a", "cpu.cfs_quota_us")) == "100000"  # nothing actuated
    del node.pods["b"]  # b leaves the node: capacity frees
    eng.observe(node.views())
    eng.reconcile()
    st = eng.status(node.view("a").uid)
    assert st is not None and st.state is ResizeState.DONE
    assert node.read(node.pod_path("a", "cpu.cfs_quota_us")) == "160000"


def test_deferred_accepted_when_another_resize_shrinks(node: ResizeNode) -> None:
    node.set_allocatable("cpu=2,memory=2Gi")
    node.add_pod(manifest("a", [ctr("app", lim={"cpu": "1", "memory": "512Mi"})]))
    node.add_pod(manifest("b", [ctr("app", lim={"cpu": "1", "memory": "512Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize("a", {"app": {"limits": {"cpu": "1500m", "memory": "512Mi"}}})
    assert settle(node, eng, "a") is ResizeState.DEFERRED
    node.resize("b", {"app": {"limits": {"cpu": "500m", "memory": "512Mi"}}})
    eng.observe(node.views())
    eng.reconcile()
    for name in ("a", "b"):
        st = eng.status(node.view(name).uid)
        assert st is not None and st.state is ResizeState.DONE, st
    assert node.violations == []


@pytest.mark.parametrize(
    ("containers", "resize", "reason"),
    [
        (
            {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}},
            {"app": {"limits": {"cpu": "2", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "256Mi"}}},
            "QOSClassChange",
        ),
        (
            {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}},
            {"app": {"limits": {"cpu": "64", "memory": "256Mi"}}},
            "InsufficientNodeAllocatable",
        ),
        (
            {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}},
            {"app": {"limits": {"cpu": "1", "memory": "256Mi", "example.com/gpu": "1"}}},
            "UnsupportedResource",
        ),
        (
            {"app": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}},
            {"app": {"requests": {"cpu": "100m"}}},
            "ResourceRemoved",
        ),
    ],
    ids=["qos-change", "over-allocatable", "other-resource", "limit-removed"],
)
def test_infeasible(
    node: ResizeNode, containers: dict[str, Any], resize: dict[str, Any], reason: str
) -> None:
    eng = start(node, "p", containers)
    before = node.read(node.pod_path("p", "cpu.cfs_quota_us"))
    node.resize("p", resize)
    assert settle(node, eng, "p") is ResizeState.INFEASIBLE
    st = eng.status(node.view("p").uid)
    assert st is not None and st.reason == reason and st.message
    assert node.read(node.pod_path("p", "cpu.cfs_quota_us")) == before


def test_infeasible_init_container_and_static_cpu(
    fake_cgroup_tree: Any, fake_cri: FakeCRI, tmp_path: Path
) -> None:
    node = ResizeNode(fake_cgroup_tree("v1"), fake_cri, tmp_path / "s", cpu_manager_policy="static")
    try:
        raw = manifest(
            "p",
            [ctr("app", lim={"cpu": "1", "memory": "256Mi"})],
            initContainers=[ctr("setup", lim={"cpu": "1", "memory": "256Mi"})],
        )
        node.add_pod(raw)
        eng = node.engine()
        eng.start(node.views())
        eng.reconcile()
        node.pods["p"].raw["spec"]["initContainers"][0]["resources"] = {
            "limits": {"cpu": "2", "memory": "256Mi"}
        }
        assert settle(node, eng, "p") is ResizeState.INFEASIBLE
        assert eng.status(node.view("p").uid).reason == "InitContainerResize"  # type: ignore[union-attr]
        node.pods["p"].raw["spec"]["initContainers"][0]["resources"] = {
            "limits": {"cpu": "1", "memory": "256Mi"}
        }
        node.resize("p", {"app": {"limits": {"cpu": "1500m", "memory": "256Mi"}}})
        assert settle(node, eng, "p") is ResizeState.INFEASIBLE
        assert eng.status(node.view("p").uid).reason == "NonIntegralCPU"  # type: ignore[union-attr]
        node.resize("p", {"app": {"limits": {"cpu": "2", "memory": "256Mi"}}})
        assert settle(node, eng, "p") is ResizeState.DONE  # whole CPUs are fine
    finally:
        node.close()


# ---- memory-usage guard


def test_memory_decrease_waits_for_usage(node: ResizeNode) -> None:
    eng = start(node, "p", {"app": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
    node.set_usage("p", "app", 200 * MI)
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "128Mi"}}})
    assert settle(node, eng, "p") is ResizeState.IN_PROGRESS
    st = eng.status(node.view("p").uid)
    assert st is not None and st.reason == "MemoryUsageAboveLimit" and str(200 * MI) in st.message
    assert node.read(node.container_path("p", "app", "memory.limit_in_bytes")) == str(256 * MI)
    assert node.read(node.container_path("p", "app", "cpu.cfs_quota_us")) == "100000"  # CPU went ahead
    node.set_usage("p", "app", 100 * MI)  # usage fell: the retry lowers it
    assert settle(node, eng, "p") is ResizeState.DONE
    assert node.read(node.container_path("p", "app", "memory.limit_in_bytes")) == str(128 * MI)
    assert node.violations == []


def test_memory_step_down_toward_usage(fake_cgroup_tree: Any, fake_cri: FakeCRI, tmp_path: Path) -> None:
    node = ResizeNode(fake_cgroup_tree("v1"), fake_cri, tmp_path / "s", memory_reclaim_step_down=True)
    try:
        eng = start(node, "p", {"app": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
        node.set_usage("p", "app", 200 * MI)
        node.resize("p", {"app": {"limits": {"cpu": "500m", "memory": "128Mi"}}})
        settle(node, eng, "p", rounds=1)
        stepped = int(node.read(node.container_path("p", "app", "memory.limit_in_bytes")))
        assert 200 * MI < stepped < 256 * MI  # just above usage: the kernel reclaims toward it
        node.set_usage("p", "app", 64 * MI)
        assert settle(node, eng, "p") is ResizeState.DONE
        assert node.read(node.container_path("p", "app", "memory.limit_in_bytes")) == str(128 * MI)
        assert node.violations == []
    finally:
        node.close()


# ---- failure handling


def test_failed_update_stops_the_plan_backs_off_and_converges(node: ResizeNode) -> None:
    g = {"limits": {"cpu": "300m", "memory": "128Mi"}}
    eng = start(node, "p", {"c1": g, "c2": g, "c3": g})
    node.cri.service.inject_error("UpdateContainerResources", grpc.StatusCode.UNKNOWN, "runc failed", times=1)
    node.resize("p", {n: {"limits": {"cpu": "500m", "memory": "256Mi"}} for n in ("c1", "c2", "c3")})
    eng.observe(node.views())
    eng.reconcile()
    st = eng.status(node.view("p").uid)
    assert st is not None and st.state is ResizeState.ERROR and st.reason == "StepFailed" and st.attempts == 1
    # the failing update was the first container step: no later step ran
    assert [e.kind for e in node.events] == ["write"]  # only the pod's memory limit grew
    assert settle(node, eng, "p") is ResizeState.DONE
    assert_kubelet_values(node, "p")
    assert node.violations == []


def test_backoff_holds_the_retry(node: ResizeNode) -> None:
    from agent.resize.state import Timing

    now = [100.0]
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    eng = node.engine(Timing(backoff_base_s=2.0, backoff_cap_s=8.0), clock=lambda: now[0])
    eng.start(node.views())
    eng.reconcile()
    node.cri.service.inject_error("UpdateContainerResources", grpc.StatusCode.UNKNOWN, "boom", times=2)
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    uid = node.view("p").uid
    calls = lambda: len(node.cri.service.calls_of("UpdateContainerResources"))  # noqa: E731
    eng.observe(node.views())
    eng.reconcile()
    assert eng.status(uid).attempts == 1 and calls() == 1  # type: ignore[union-attr]
    eng.reconcile()  # not due yet: no call
    assert calls() == 1
    now[0] += 2.0
    eng.reconcile()
    assert eng.status(uid).attempts == 2 and calls() == 2  # type: ignore[union-attr]
    now[0] += 2.0
    eng.reconcile()
    assert calls() == 2  # the second delay is 4 s
    now[0] += 2.0
    eng.reconcile()
    assert eng.status(uid).state is ResizeState.DONE  # type: ignore[union-attr]


# ---- sequencing


def test_newer_desired_state_replaces_a_queued_one(node: ResizeNode) -> None:
    eng = start(node, "p", {"app": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
    node.resize("p", {"app": {"limits": {"cpu": "2", "memory": "256Mi"}}})
    eng.observe(node.views())
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    eng.observe(node.views())
    assert eng.status(node.view("p").uid).state is ResizeState.PROPOSED  # type: ignore[union-attr]
    report = eng.reconcile()
    assert report.accepted == [node.view("p").uid]
    assert node.read(node.pod_path("p", "cpu.cfs_quota_us")) == "100000"
    assert "200000" not in [e.value for e in node.events]  # the replaced state never reached the kernel


def test_resize_annotation_is_the_desired_state(node: ResizeNode) -> None:
    eng = start(node, "p", {"app": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
    node.pods["p"].raw["metadata"]["annotations"] = {
        "kube-cgroup-agent.io/resize": '{"containers": {"app": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}}'
    }
    assert settle(node, eng, "p") is ResizeState.DONE
    assert node.read(node.container_path("p", "app", "cpu.cfs_quota_us")) == "100000"


def _unused(tree: FakeCgroupTree) -> None:
    del tree
