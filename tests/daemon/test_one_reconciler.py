"""One reconciler on every node: the resize engine behind the ownership table.

On a node whose kubelet resizes containers (v1.33+), the same engine runs with the kubelet's things
observed, never written: no CRI call, no pod or container cgroup write; it follows the kubelet's
allocation (`allocatedResources`) for each pod's values and sums the tiers as the kubelet's QoS pass
does (the pods as they ask, allocated or not), so the tiers it sizes agree with the kubelet's; its admission
still judges what the agent's own sources change (pod-level values). `reconciler:` is accepted with a
deprecation warning and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent.config.settings import from_mapping
from agent.core.ownership import resolve
from agent.daemon import select_reconciler
from agent.daemon.engine_reconciler import EngineReconciler
from agent.daemon.reconciler import Outcome, ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri

BURSTABLE_SHARES = "cpu/kubepods/burstable/cpu.shares"
NO_STOP = lambda: False  # noqa: E731


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ResizeNode]:
    with running_fake_cri(tmp_path) as cri:
        n = ResizeNode(FakeCgroupTree(tmp_path / "tree", "v1"), cri, tmp_path / "state")
        n.add_pod(
            manifest("a", [ctr("app", req={"cpu": "500m", "memory": "128Mi"}, lim={"cpu": "1", "memory": "256Mi"})])
        )
        try:
            yield n
        finally:
            n.close()


def _reconciler(node: ResizeNode, kubelet: str | None) -> EngineReconciler:
    rec = select_reconciler(node.settings, node.env, resolve({}, kubelet, {}), node.client)
    assert isinstance(rec, EngineReconciler)
    views = node.views()
    rec.start(views)
    rec.reconcile_tiers(views, NO_STOP)
    return rec


def _kubelet_resizes(node: ResizeNode, cpu_request: str, cpu_limit: str, allocated: bool) -> None:
    """What a v1.36 kubelet does with a pods/resize: the spec changes; once admitted it reports the new
    requests as allocated and writes the pod and container cgroups itself."""
    node.resize("a", {"app": {"requests": {"cpu": cpu_request, "memory": "128Mi"}, "limits": {"cpu": cpu_limit, "memory": "256Mi"}}})
    if allocated:
        node.pods["a"].allocated["app"] = {"cpu": cpu_request, "memory": "128Mi"}


def test_on_a_kubelet_owned_node_the_agent_moves_the_tiers_and_never_writes_what_the_kubelet_owns(
    node: ResizeNode,
) -> None:
    rec = _reconciler(node, "v1.36.0")
    assert node.read(BURSTABLE_SHARES) == "512"
    quota = node.pod_path("a", "cpu.cfs_quota_us")
    container_quota = node.container_path("a", "app", "cpu.cfs_quota_us")
    updates_before, quota_before = node.updates, node.read(quota)

    _kubelet_resizes(node, "1", "2", allocated=True)
    report = rec.reconcile_pod(node.view("a"), NO_STOP)

    assert node.read(BURSTABLE_SHARES) == "1024"  # the tier follows the pods' requests
    assert node.read(quota) == quota_before  # the kubelet's to write: observed, not written
    assert node.read(container_quota) == "100000"
    assert node.updates == updates_before  # no UpdateContainerResources: the kubelet resizes
    assert report.outcome is Outcome.APPLIED and report.changed == (BURSTABLE_SHARES,)
    status = rec.status(node.view("a").uid)
    assert status is not None and status.state is ResizeState.DONE
    assert node.violations == []


def test_a_resize_the_kubelet_has_not_allocated_yet_waits_for_it(node: ResizeNode) -> None:
    rec = _reconciler(node, "v1.36.0")
    node.pods["a"].allocated["app"] = {"cpu": "500m", "memory": "128Mi"}
    _kubelet_resizes(node, "1", "2", allocated=False)  # the kubelet deferred it: still the old requests

    rec.reconcile_pod(node.view("a"), NO_STOP)
    status = rec.status(node.view("a").uid)
    assert status is not None and status.state is ResizeState.DEFERRED and status.reason == "WaitingForKubelet"
    # sized as the kubelet's QoS pass sizes it: from its pod manager's pods (the spec), not the allocation
    assert node.read(BURSTABLE_SHARES) == "1024"
    quota = node.container_path("a", "app", "cpu.cfs_quota_us")
    assert node.read(quota) == "100000"  # the container's values wait for the kubelet

    node.pods["a"].allocated["app"] = {"cpu": "1", "memory": "128Mi"}  # admitted later: a status update
    rec.reconcile_pod(node.view("a"), NO_STOP)
    status = rec.status(node.view("a").uid)
    assert status is not None and status.state is ResizeState.DONE
    assert node.read(BURSTABLE_SHARES) == "1024"


def test_on_a_bare_node_the_same_reconciler_resizes_the_containers(node: ResizeNode) -> None:
    rec = _reconciler(node, None)
    _kubelet_resizes(node, "1", "2", allocated=False)  # no kubelet: nothing reports an allocation
    rec.reconcile_pod(node.view("a"), NO_STOP)
    assert node.read(BURSTABLE_SHARES) == "1024"
    assert node.read(node.pod_path("a", "cpu.cfs_quota_us")) == "200000"
    assert node.read(node.container_path("a", "app", "cpu.cfs_quota_us")) == "200000"
    assert node.updates == 1
    assert node.violations == []


def test_admission_still_judges_what_the_agents_own_sources_change(node: ResizeNode) -> None:
    """v1.33: the kubelet resizes containers but not pod-level values, which the agent owns: a pod-level
    change that cannot fit the node is Infeasible, whoever owns the containers."""
    rec = _reconciler(node, "v1.33.0")
    raw = node.pods["a"].raw
    raw["spec"]["resources"] = {"requests": {"cpu": "64"}, "limits": {"cpu": "64"}}
    rec.reconcile_pod(node.view("a"), NO_STOP)
    status = rec.status(node.view("a").uid)
    assert status is not None and status.state is ResizeState.INFEASIBLE
    assert status.reason == "InsufficientNodeAllocatable"


def test_the_reconciler_key_is_deprecated_and_changes_nothing(node: ResizeNode) -> None:
    for value in ("pipeline", "engine", "auto"):
        settings = from_mapping({"reconciler": value}, base=node.settings)
        with capture_logs() as logs:
            rec = select_reconciler(settings, node.env, resolve({}, None, {}), node.client)
        assert isinstance(rec, EngineReconciler)
        warned = [e for e in logs if e["event"] == "config.deprecated"]
        assert len(warned) == 1 and "reconciler" in warned[0]["message"]
    with capture_logs() as logs:
        select_reconciler(replace(node.settings, explicit=frozenset()), node.env, resolve({}, None, {}), node.client)
    assert not [e for e in logs if e["event"] == "config.deprecated"]


def test_a_kubelet_owned_nodes_resync_reads_only_what_the_agent_owns(
    node: ResizeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet's values are neither written nor reported: not read either (the resync's cost)."""
    for kubelet, reads_pods in (("v1.36.0", False), (None, True)):
        rec = _reconciler(node, kubelet)
        read: list[str] = []
        real = node.files.read_many

        def counting(paths: object, real: object = real, read: list[str] = read) -> object:
            got = list(paths)  # type: ignore[call-overload]
            read.extend(got)
            return real(got)  # type: ignore[operator]

        monkeypatch.setattr(node.files, "read_many", counting)
        rec.stale(node.views())
        rec.reconcile_tiers(node.views(), NO_STOP)
        monkeypatch.undo()
        assert any("kubepods/burstable/cpu.shares" in p for p in read)
        assert any(node.pods["a"].pod_dir + "/" in p for p in read) is reads_pods, (kubelet, read)
        assert not [p for p in read if "usage_in_bytes" in p]  # converged: no memory guard to feed
