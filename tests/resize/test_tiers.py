"""The QoS tiers move with every resize and departure, in an order that protects the higher tiers
(fake CRI, fake v1 tree; the engine alone and as the daemon's reconciler): qos-reserved memory 100% on a 16 GiB node.

- a Guaranteed pod's memory grows in place: BestEffort, then Burstable shrink before the pod's values grow;
- a Burstable pod shrinks: the BestEffort tier grows after the pod's values shrank;
- a pod leaves: the tiers follow in the very next pass;
- a growth that waits (Deferred) moves the tiers at once, as the kubelet sums the pods as they ask;
- one that cannot fit (Infeasible) would take them below zero: they are set at their usage instead;
- the kernel refuses a tier shrink (usage above it): the limit is set at the usage, the resize goes on,
  and a later pass lowers it once usage allows.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.core.ownership import resolve
from agent.core.plan import CgroupStep
from agent.daemon.drift import DriftTracker
from agent.daemon.engine_reconciler import EngineReconciler
from agent.daemon.gate import Gate
from agent.pipeline.execute import CgroupStepRunner, file_runner
from agent.resize.engine import ResizeEngine
from agent.resize.types import ResizeState
from cgroupfs.errors import MemoryBelowUsage
from cgroupfs.refusals import write_refusal
from tests.resize.harness import ResizeNode
from tests.resize.journal import Event
from tests.resize.manifests import GI, MI, ctr, manifest
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri

ALLOC = 16 * GI
BURSTABLE = "memory/kubepods/burstable/memory.limit_in_bytes"
BESTEFFORT = "memory/kubepods/besteffort/memory.limit_in_bytes"


def _kernel(inner: CgroupStepRunner, node: ResizeNode) -> CgroupStepRunner:
    """The v1 kernel's refusals: a negative memory limit (but -1, no limit) is EINVAL; one below the
    cgroup's usage is EBUSY."""

    def run(step: CgroupStep) -> int:
        if step.setting.filename == "memory.limit_in_bytes":
            if int(step.setting.value) < -1:
                einval = OSError(errno.EINVAL, "Invalid argument")
                raise write_refusal(step.path, step.setting.filename, step.setting.value, einval, lambda _: None)
            usage = int(node.read(f"{step.setting.directory}/memory.usage_in_bytes"))
            if int(step.setting.value) < usage:
                raise MemoryBelowUsage("write", step.path, "EBUSY: below usage", step.setting.value, usage)
        return inner(step)

    return run


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ResizeNode]:
    with running_fake_cri(tmp_path) as cri:
        n = ResizeNode(
            FakeCgroupTree(tmp_path / "tree", "v1"),
            cri,
            tmp_path / "state",
            allocatable=f"cpu=8,memory={ALLOC}",
            qos_reserved_memory_percent=100,
        )
        try:
            yield n
        finally:
            n.close()


def _pods(node: ResizeNode) -> None:
    node.add_pod(manifest("g", [ctr("c", lim={"cpu": "1", "memory": "1Gi"})]))
    node.add_pod(
        manifest("b", [ctr("c", req={"cpu": "500m", "memory": "512Mi"}, lim={"cpu": "1", "memory": "1Gi"})])
    )


class Engine:
    """The resize engine as the daemon drives it: pod updates in, one pass per event."""

    def __init__(self, node: ResizeNode) -> None:
        self.node = node
        self.engine = ResizeEngine(
            node.settings,
            node.env,
            node.engine().runtime,
            cgroup=node._runner(_kernel(file_runner(node.files), node)),
            timing=node.engine().timing,
        )
        self.engine.start(node.views())
        self.engine.reconcile()

    def resize(self, pod: str, containers: dict[str, dict[str, Any]]) -> None:
        self.engine.update(self.node.resize(pod, containers))
        self.report = self.engine.reconcile(full=False)

    def remove(self, pod: str) -> None:
        uid = self.node.view(pod).uid
        _kubelet_removes(self.node, pod)
        self.engine.remove(uid)
        self.report = self.engine.reconcile(full=False)

    def resync(self) -> None:
        self.report = self.engine.reconcile(full=True)

    def state(self, pod: str) -> ResizeState | None:
        status = self.engine.status(self.node.view(pod).uid)
        return status.state if status is not None else None

    def shortfalls(self) -> list[tuple[str, int, int]]:
        return [(s.path, s.wanted, s.set_to) for s in self.report.shortfalls]


class Reconciler:
    """The daemon's reconciler (the engine behind the ownership table and the drift gate): a pod item
    per event, the tiers item after it."""

    def __init__(self, node: ResizeNode) -> None:
        self.node = node
        engine = Engine(node).engine
        gate = Gate(resolve({}, None, {}), DriftTracker(3, 60.0), systemd=False)
        self.rec = EngineReconciler(engine, gate=gate)
        self.rec.start(node.views())
        self.rec.reconcile_tiers(node.views(), lambda: False)

    def resize(self, pod: str, containers: dict[str, dict[str, Any]]) -> None:
        self.report = self.rec.reconcile_pod(self.node.resize(pod, containers), lambda: False)

    def remove(self, pod: str) -> None:
        uid = self.node.view(pod).uid
        _kubelet_removes(self.node, pod)
        self.rec.forget_pod(uid)
        self.report = self.rec.reconcile_tiers(self.node.views(), lambda: False)

    def resync(self) -> None:
        self.rec.stale(self.node.views())
        self.report = self.rec.reconcile_tiers(self.node.views(), lambda: False)

    def state(self, pod: str) -> ResizeState | None:
        status = self.rec.status(self.node.view(pod).uid)
        return status.state if status is not None else None

    def shortfalls(self) -> list[tuple[str, int, int]]:
        return [(s.path, s.wanted, s.set_to) for s in self.report.shortfalls]


def _kubelet_removes(node: ResizeNode, pod: str) -> None:
    info = node.pods.pop(pod)
    for cid in info.containers.values():
        for controller in ("cpu", "memory"):
            node.tree.remove(f"{controller}/{info.pod_dir}/{cid}")
    for controller in ("cpu", "memory"):
        node.tree.remove(f"{controller}/{info.pod_dir}")


@pytest.fixture(params=["engine", "reconciler"])
def driver(request: pytest.FixtureRequest, node: ResizeNode) -> Engine | Reconciler:
    _pods(node)
    d: Engine | Reconciler = Engine(node) if request.param == "engine" else Reconciler(node)
    assert int(node.read(BURSTABLE)) == ALLOC - GI  # converged before the test's change
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 512 * MI
    node.events.clear()
    return d


def _index(events: list[Event], pred: Any) -> int:
    found = [i for i, e in enumerate(events) if pred(e)]
    assert found, [(e.kind, e.target) for e in events]
    return found[0]


def _write(path: str) -> Any:
    return lambda e: e.kind == "write" and e.target == path


def _pod_memory(node: ResizeNode, pod: str) -> Any:
    return _write(node.pod_path(pod, "memory.limit_in_bytes"))


def _update(pod: str) -> Any:
    return lambda e: e.kind == "update" and e.target.startswith(f"{pod}/")


def test_a_guaranteed_pod_growing_shrinks_the_lower_tiers_first(
    node: ResizeNode, driver: Engine | Reconciler
) -> None:
    driver.resize("g", {"c": {"limits": {"cpu": "1", "memory": "2Gi"}}})
    ev = node.events
    be, bu = _index(ev, _write(BESTEFFORT)), _index(ev, _write(BURSTABLE))
    assert be < bu < _index(ev, _pod_memory(node, "g")) < _index(ev, _update("g"))
    # in the same pass, the tiers hold their new values
    assert int(node.read(BURSTABLE)) == ALLOC - 2 * GI
    assert int(node.read(BESTEFFORT)) == ALLOC - 2 * GI - 512 * MI
    assert node.container_state("g", "c")[1] == 2 * GI
    assert driver.state("g") is ResizeState.DONE
    assert node.violations == []


def test_a_burstable_pod_shrinking_grows_the_besteffort_tier_after(
    node: ResizeNode, driver: Engine | Reconciler
) -> None:
    driver.resize(
        "b",
        {"c": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}},
    )
    ev = node.events
    grow = _index(ev, _write(BESTEFFORT))
    assert _index(ev, _update("b")) < _index(ev, _pod_memory(node, "b")) < grow
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 256 * MI
    assert int(node.read(BURSTABLE)) == ALLOC - GI  # no Guaranteed request changed
    assert not any(_write(BURSTABLE)(e) for e in ev)
    assert driver.state("b") is ResizeState.DONE
    assert node.violations == []


def test_a_pod_leaving_moves_the_tiers_in_the_next_pass(node: ResizeNode, driver: Engine | Reconciler) -> None:
    driver.remove("g")
    assert int(node.read(BURSTABLE)) == ALLOC
    assert int(node.read(BESTEFFORT)) == ALLOC - 512 * MI
    # the BestEffort tier grows after the Burstable one (the lowest tier is the most held back)
    assert _index(node.events, _write(BURSTABLE)) < _index(node.events, _write(BESTEFFORT))


def test_a_deferred_growth_lowers_the_tiers_below_at_once(node: ResizeNode, driver: Engine | Reconciler) -> None:
    """The kubelet's QoS pass sums the pods as they ask (its pod manager's pods), not their allocation: a
    Guaranteed pod's growth that waits for room (Deferred) already protects its new request; the pod's
    own values wait."""
    driver.resize("g", {"c": {"limits": {"cpu": "8", "memory": "2Gi"}}})  # 8.5 CPUs asked of 8: Deferred
    assert driver.state("g") is ResizeState.DEFERRED
    assert int(node.read(BURSTABLE)) == ALLOC - 2 * GI
    assert int(node.read(BESTEFFORT)) == ALLOC - 2 * GI - 512 * MI
    assert node.container_state("g", "c")[1] == GI
    assert not any(_pod_memory(node, "g")(e) or _update("g")(e) for e in node.events)
    assert node.violations == []


def test_an_infeasible_growth_sets_the_tiers_below_at_their_usage(node: ResizeNode, driver: Engine | Reconciler) -> None:
    """Counted as it asks, a Guaranteed pod's growth past allocatable takes the formula for the tiers
    below zero; the kernel refuses that, and the kubelet sets them at their usage: so does the agent."""
    node.tree.set("memory/kubepods/burstable/memory.usage_in_bytes", str(GI))  # b at its limit
    node.tree.set("memory/kubepods/besteffort/memory.usage_in_bytes", str(40 * MI))
    driver.resize("g", {"c": {"limits": {"cpu": "1", "memory": "20Gi"}}})  # of a 16 GiB node
    assert driver.state("g") is ResizeState.INFEASIBLE
    assert int(node.read(BURSTABLE)) == GI
    assert int(node.read(BESTEFFORT)) == 40 * MI
    assert node.container_state("g", "c")[1] == GI
    assert node.violations == []


def test_a_refused_tier_shrink_is_set_at_usage_and_converges_later(
    node: ResizeNode, driver: Engine | Reconciler
) -> None:
    usage = ALLOC - 2 * GI - 100 * MI  # above the BestEffort tier's next limit
    node.tree.set("memory/kubepods/besteffort/memory.usage_in_bytes", str(usage))
    driver.resize("g", {"c": {"limits": {"cpu": "1", "memory": "2Gi"}}})
    want = ALLOC - 2 * GI - 512 * MI
    assert int(node.read(BESTEFFORT)) == usage  # as the kubelet does: the tier cannot grow further
    assert driver.shortfalls() == [(BESTEFFORT, want, usage)]
    assert int(node.read(BURSTABLE)) == ALLOC - 2 * GI
    assert node.container_state("g", "c")[1] == 2 * GI  # the resize went on
    assert driver.state("g") is ResizeState.DONE

    node.tree.set("memory/kubepods/besteffort/memory.usage_in_bytes", str(want - 64 * MI))
    driver.resync()  # the periodic pass
    assert int(node.read(BESTEFFORT)) == want
    assert driver.shortfalls() == []
    assert node.violations == []


def test_a_burstable_shrink_held_by_usage_keeps_the_lower_tier_where_it_is(node: ResizeNode) -> None:
    """The tiers grow only once the pod's values are down: not while its decrease waits for usage."""
    _pods(node)
    d = Reconciler(node)
    node.set_usage("b", "c", 900 * MI)
    d.resize(
        "b",
        {"c": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}},
    )
    status = d.rec.status(node.view("b").uid)
    assert status is not None and status.reason == "MemoryUsageAboveLimit"
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 512 * MI
    d.resync()  # nor does the tiers item raise it while the pod holds its old values
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 512 * MI
    node.set_usage("b", "c", 100 * MI)
    d.resize(
        "b",
        {"c": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}},
    )
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 256 * MI


def _terminal(node: ResizeNode, pod: str) -> Any:
    from agent.pods.parse import parse_pod

    raw = node.raw(pod)
    raw["status"] = {**raw["status"], "phase": "Succeeded"}
    return parse_pod(raw)


def test_a_terminal_pod_counts_until_its_cgroup_is_gone(node: ResizeNode, driver: Engine | Reconciler) -> None:
    """As the kubelet counts it: a pod that reached a terminal phase still holds its tiers' reservation
    until it is torn down (its pod cgroup removed); then the tiers follow in the next pass."""
    done = _terminal(node, "g")
    others = [node.view("b")]
    if isinstance(driver, Engine):
        driver.engine.update(done)
        driver.engine.reconcile(full=False)
        assert driver.engine.lingering == 1
    else:
        report = driver.rec.reconcile_tiers([done, *others], lambda: False)
        assert report.retry_after_s is not None and report.retry_after_s <= 2.0  # looks again soon
    assert int(node.read(BURSTABLE)) == ALLOC - GI  # still counted
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 512 * MI

    _kubelet_removes(node, "g")  # torn down; the API object may stay (a completed Job's pod does)
    if isinstance(driver, Engine):
        driver.engine.reconcile(full=False)
        assert driver.engine.lingering == 0
    else:
        driver.rec.reconcile_tiers([done, *others], lambda: False)
    assert int(node.read(BURSTABLE)) == ALLOC
    assert int(node.read(BESTEFFORT)) == ALLOC - 512 * MI


def test_a_pod_being_deleted_counts_until_its_cgroup_is_gone(node: ResizeNode, driver: Engine | Reconciler) -> None:
    """deletionTimestamp set, containers still running: nothing about the tiers changes. The kubelet
    removes the pod cgroup as the pod's last act and stops counting it then, before the API server drops
    the object: so does the agent (a tier value apart from the kubelet's in that window was a fight in
    the e2e-k8s five-minute run)."""
    raw = node.raw("g")
    raw["metadata"] = {**raw["metadata"], "deletionTimestamp": "2026-11-22T00:00:00Z"}
    from agent.pods.parse import parse_pod

    deleting = parse_pod(raw)
    assert deleting.deleting
    if isinstance(driver, Engine):
        driver.engine.update(deleting)
        driver.engine.reconcile(full=True)
        assert driver.engine.lingering == 1
    else:
        driver.rec.reconcile_pod(deleting, lambda: False)
        report = driver.rec.reconcile_tiers([deleting, node.view("b")], lambda: False)
        assert report.retry_after_s is not None and report.retry_after_s <= 2.0  # looks again soon
    assert int(node.read(BURSTABLE)) == ALLOC - GI
    assert int(node.read(BESTEFFORT)) == ALLOC - GI - 512 * MI

    _kubelet_removes(node, "g")  # torn down; the API object is still there, being deleted
    if isinstance(driver, Engine):
        driver.engine.reconcile(full=False)
        assert driver.engine.lingering == 0
    else:
        driver.rec.reconcile_tiers([deleting, node.view("b")], lambda: False)
    assert int(node.read(BURSTABLE)) == ALLOC
    assert int(node.read(BESTEFFORT)) == ALLOC - 512 * MI
