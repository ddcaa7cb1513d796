"""The resize engine in the daemon backs off from drift and yields as the pipeline reconciler does: a
value someone keeps changing back is re-applied in its node-wide passes, then left alone with one
warning naming the likely owner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent.core.model import PodView
from agent.core.ownership import resolve
from agent.daemon.drift import DriftTracker
from agent.daemon.engine_reconciler import EngineReconciler
from agent.daemon.gate import Gate
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ResizeNode]:
    with running_fake_cri(tmp_path) as cri:
        n = ResizeNode(FakeCgroupTree(tmp_path / "tree", "v1"), cri, tmp_path / "state")
        n.add_pod(manifest("a", [ctr("app", lim={"cpu": "500m", "memory": "128Mi"})]))
        try:
            yield n
        finally:
            n.close()


def _converged(
    node: ResizeNode, now: list[float], max_reverts: int, backoff_s: float
) -> tuple[EngineReconciler, list[PodView], str]:
    """The engine in the daemon with a drift gate on a fake clock, after its first node-wide pass."""
    gate = Gate(resolve({}, None, {}), DriftTracker(max_reverts, backoff_s), systemd=False)
    rec = EngineReconciler(node.engine(), gate=gate, clock=lambda: now[0])
    views = node.views()
    rec.start(views)
    rec.reconcile_tiers(views, lambda: False)
    return rec, views, node.pod_path("a", "cpu.cfs_quota_us")


def test_a_value_reverted_again_and_again_is_reapplied_then_yielded(node: ResizeNode) -> None:
    now = [1000.0]
    rec, views, quota = _converged(node, now, max_reverts=2, backoff_s=10.0)
    assert node.read(quota) == "50000"

    actions = []
    for _ in range(4):  # someone else writes it back before every resync
        node.tree.set(quota, "90000")
        now[0] += 3600.0  # past any backoff
        assert rec.stale(views) == set()
        report = rec.reconcile_tiers(views, lambda: False)
        actions.append([(n.action, n.reverts) for n in report.drift if n.path == quota])
        if report.warnings:
            warning = report.warnings[0]
    assert actions == [[("reapplied", 1)], [("reapplied", 2)], [("yielded", 0)], []]
    assert node.read(quota) == "90000"  # left to the other writer
    assert "Likely owner" in warning and quota in warning


def test_a_revert_inside_the_backoff_is_held(node: ResizeNode) -> None:
    now = [1000.0]
    rec, views, quota = _converged(node, now, max_reverts=3, backoff_s=600.0)
    node.tree.set(quota, "90000")
    now[0] += 60.0
    rec.stale(views)
    report = rec.reconcile_tiers(views, lambda: False)
    assert [n.action for n in report.drift] == ["held"]
    assert node.read(quota) == "90000"


def test_a_yielded_value_stays_yielded_across_a_restart(node: ResizeNode) -> None:
    """The contested drift records are in the state store: a restarted agent does not fight again over
    a value it gave up on (nor forget how often it was reverted)."""
    now = [1000.0]
    rec, views, quota = _converged(node, now, max_reverts=1, backoff_s=1.0)
    for _ in range(3):
        node.tree.set(quota, "90000")
        now[0] += 3600.0
        rec.stale(views)
        rec.reconcile_tiers(views, lambda: False)
    assert node.read(quota) == "90000"  # yielded
    saved = json.loads((node.settings.state_dir / "drift.json").read_text())["data"]
    assert saved[quota]["yielded"] is True

    restarted, views, _ = _converged(node, now, max_reverts=1, backoff_s=1.0)
    now[0] += 3600.0
    restarted.stale(views)
    report = restarted.reconcile_tiers(views, lambda: False)
    assert node.read(quota) == "90000"  # still left to the other writer
    assert quota not in report.changed


def test_a_restart_says_what_it_took_up_from_the_state_directory(node: ResizeNode) -> None:
    """An upgrade or a restart logs what the previous run's state directory gave it: the pods' records and
    the drift records read, not rebuilt (the first start finds none)."""
    now = [1000.0]
    with capture_logs() as first:
        rec, views, quota = _converged(node, now, max_reverts=3, backoff_s=1.0)
    node.tree.set(quota, "90000")
    now[0] += 3600.0
    rec.stale(views)
    rec.reconcile_tiers(views, lambda: False)  # a drift record to keep
    with capture_logs() as second:
        _converged(node, now, max_reverts=3, backoff_s=1.0)
    [before] = [e for e in first if e["event"] == "state.resumed"]
    [after] = [e for e in second if e["event"] == "state.resumed"]
    assert (before["pod_records"], before["drift_records"]) == (0, 0)
    assert (after["pod_records"], after["drift_records"]) == (1, 1)
    assert after["state_dir"] == str(node.settings.state_dir)


def test_a_change_while_the_view_of_the_pods_is_behind_is_held_not_counted(node: ResizeNode) -> None:
    """With the watch broken, the kubelet may have acted on what the agent has not seen (a resize it
    actuated, its status not posted): such a change is left alone and not counted as a revert; once the
    view is current again it is put back as a first revert."""
    now = [1000.0]
    rec, views, quota = _converged(node, now, max_reverts=1, backoff_s=1.0)
    rec.view_behind("watch pods of node n1: connection refused")
    for _ in range(3):  # more changes than max_reverts: none counts
        node.tree.set(quota, "90000")
        now[0] += 3600.0
        rec.stale(views)
        report = rec.reconcile_tiers(views, lambda: False)
        assert [(n.action, "connection refused" in n.message) for n in report.drift if n.path == quota] == [("held", True)]
        assert node.read(quota) == "90000"
    rec.view_behind(None)
    now[0] += 3600.0
    rec.stale(views)
    report = rec.reconcile_tiers(views, lambda: False)
    assert [(n.action, n.reverts) for n in report.drift if n.path == quota] == [("reapplied", 1)]
    assert node.read(quota) == "50000"


def test_a_damaged_drift_record_file_starts_empty_with_a_warning(node: ResizeNode) -> None:
    node.settings.state_dir.mkdir(parents=True, exist_ok=True)
    (node.settings.state_dir / "drift.json").write_text('{"kind": "KubeCgroupAgentNodeRecord", "data": {}}')
    gate = Gate(resolve({}, None, {}), DriftTracker(3, 10.0), systemd=False)
    rec = EngineReconciler(node.engine(), gate=gate)
    warnings = rec.start(node.views())
    assert any("drift.json" in w and "starting empty" in w for w in warnings)


def test_a_pod_file_changed_after_a_new_generation_is_the_kubelets_resize_not_drift(node: ResizeNode) -> None:
    """A kubelet that resizes in place rewrites the pod cgroup from the new spec (pods/resize bumps
    metadata.generation): the agent writes its value again and counts no drift. The same change at the
    same generation is a revert, counted."""
    now = [1000.0]
    rec, views, quota = _converged(node, now, max_reverts=3, backoff_s=1.0)
    assert node.read(quota) == "50000"

    def pass_with(generation: int) -> list[str]:
        node.tree.set(quota, "90000")
        now[0] += 3600.0
        gen_views = [replace(v, generation=generation) for v in views]
        rec.stale(gen_views)
        report = rec.reconcile_tiers(gen_views, lambda: False)
        assert node.read(quota) == "50000", "written again either way"
        return [n.action for n in report.drift if n.path == quota]

    assert pass_with(views[0].generation) == ["reapplied"]  # a revert at the same generation
    assert pass_with(views[0].generation + 1) == []  # the kubelet's resize of a new generation
    assert pass_with(views[0].generation + 1) == ["reapplied"]  # then a revert again
    assert pass_with(views[0].generation + 2) == []


def test_a_value_another_writer_set_to_what_the_agent_came_to_want_is_not_reverted_later(
    node: ResizeNode,
) -> None:
    """The kubelet's QoS pass on a pod's arrival writes the tier value the agent now wants too; when the
    pod leaves, the agent moving the tier back is its own change, not a revert of its earlier write (the
    e2e-k8s five-minute run counted it as a fight)."""
    shares = "cpu/kubepods/burstable/cpu.shares"
    now = [1000.0]
    rec, _, _ = _converged(node, now, max_reverts=3, backoff_s=600.0)
    node.add_pod(manifest("b1", [ctr("app", req={"cpu": "200m"})]))
    rec.reconcile_pod(node.view("b1"), lambda: False)
    assert node.read(shares) == "204"  # the agent's write

    node.add_pod(manifest("b2", [ctr("app", req={"cpu": "300m"})]))
    node.tree.set(shares, "512")  # the kubelet's QoS pass at b2's arrival, before the agent's
    now[0] += 1.0
    report = rec.reconcile_pod(node.view("b2"), lambda: False)
    assert shares not in report.changed and node.read(shares) == "512"

    uid = node.view("b2").uid
    info = node.pods.pop("b2")
    for controller in ("cpu", "memory"):
        for cid in info.containers.values():
            node.tree.remove(f"{controller}/{info.pod_dir}/{cid}")
        node.tree.remove(f"{controller}/{info.pod_dir}")
    rec.forget_pod(uid)
    now[0] += 1.0  # inside any backoff: a revert would be held
    report = rec.reconcile_tiers(node.views(), lambda: False)
    assert [n.action for n in report.drift if n.path == shares] == []
    assert node.read(shares) == "204"
