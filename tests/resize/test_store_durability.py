"""What a pod event writes to the state store, and how durably.

A resize's record is written twice: admitted (new allocation, in the queue), fsynced before the first
cgroup write (its directory too when the file is new; a replaced record is renamed as the kubelet renames
its checkpoints, without a directory fsync); then completed (same allocation, out of the queue), which the store holds
back until the engine's node-wide pass or the daemon's shutdown flushes it. Losing it in a crash leaves
the admitted record, which restores the pod InProgress at the same allocation and is finished by the
next run. A pod event hands the store only the pods it touched: every allocation it changed is on disk
after its pass."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent.daemon.engine_reconciler import EngineReconciler
from agent.resize import store as store_mod
from agent.resize.allocation import allocation_of
from agent.resize.engine import ResizeEngine
from agent.resize.store import PodStore, completes, encode_record
from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.journal import Event
from tests.resize.manifests import ctr, manifest
from tests.resize.test_checkpoint import _record
from tests.resize.test_matrix import assert_kubelet_values


def _dir_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = store_mod.fsync_dir

    def counting(path: Path) -> None:
        calls.append(path)
        real(path)

    monkeypatch.setattr(store_mod, "fsync_dir", counting)
    return calls


def test_a_completion_waits_for_the_flush_and_only_new_or_removed_files_fsync_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _dir_fsyncs(monkeypatch)
    store = PodStore(tmp_path / "state")
    admitted = _record("p", cpu="1", arrival=3)
    store.save([admitted])
    assert (store.writes, len(calls)) == (1, 1)  # a new record: durable at once

    done = dataclasses.replace(admitted, arrival=None, state=ResizeState.DONE)
    assert completes(admitted, done)
    store.save([done])
    assert (store.writes, len(calls), store.deferred) == (1, 1, 1)  # held back: the admitted one is durable
    [back] = PodStore(tmp_path / "state").load().records
    assert back.arrival == 3  # a crash now restarts the pod InProgress at the same allocation
    store.flush()
    assert (store.writes, len(calls), store.deferred) == (2, 1, 0)  # a replaced record: no directory fsync
    [back] = PodStore(tmp_path / "state").load().records
    assert back.arrival is None
    store.flush()
    assert (store.writes, len(calls)) == (2, 1)  # nothing held: nothing written

    again = _record("p", cpu="2", arrival=4)  # the next resize: a new allocation, written at once
    store.save([again])
    assert (store.writes, len(calls), store.deferred) == (3, 1, 0)

    moved = _record("p", cpu="3")  # out of the queue at another allocation: not a completion
    assert not completes(again, moved)
    store.save([moved])
    assert (store.writes, len(calls), store.deferred) == (4, 1, 0)

    store.save([moved, _record("q", cpu="1")])  # a new file: its name made durable
    assert (store.writes, len(calls)) == (5, 2)
    store.save([moved])  # q gone: its removal too
    assert (store.writes, len(calls)) == (5, 3)


def test_a_held_completion_gives_way_to_a_newer_record_and_to_the_pods_departure(tmp_path: Path) -> None:
    store = PodStore(tmp_path / "state")
    p, q = _record("p", cpu="1", arrival=1), _record("q", cpu="1", arrival=2)
    store.save([p, q])
    p_done, q_done = (dataclasses.replace(r, arrival=None, state=ResizeState.DONE) for r in (p, q))
    store.save([p_done, q_done])
    assert store.deferred == 2
    p_next = _record("p", cpu="2", arrival=3)  # p resized again before any flush
    store.save([p_next])  # q gone
    assert (store.deferred, store.writes) == (0, 3)
    store.flush()
    [back] = PodStore(tmp_path / "state").load().records
    assert (back.uid, back.arrival, store.writes) == (p_next.uid, 3, 3)


def test_a_lost_completion_restores_the_pod_in_progress_and_the_next_run_finishes_it(
    node: ResizeNode,
) -> None:
    node.add_pod(manifest("p", [ctr("c", lim={"cpu": "300m", "memory": "128Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    uid = node.view("p").uid
    node.resize("p", {"c": {"limits": {"cpu": "500m", "memory": "192Mi"}}})
    eng.observe(node.views())
    eng.reconcile()
    status = eng.status(uid)
    assert status is not None and status.state is ResizeState.DONE

    # the crash lost the completion's rename: the directory shows the admitted record again
    store = PodStore(node.settings.state_dir)
    [done] = store.load(persist=False).records
    assert done.arrival is None and done.allocated == allocation_of(node.view("p"))
    admitted = dataclasses.replace(done, arrival=1)
    assert completes(admitted, done)
    (store.path / f"{uid}.json").write_bytes(encode_record(admitted))

    again = node.engine()
    again.start(node.views())
    status = again.status(uid)
    assert status is not None and status.state is ResizeState.IN_PROGRESS
    assert status.allocated == allocation_of(node.view("p"))  # the accepted resize survived
    again.reconcile()
    status = again.status(uid)
    assert status is not None and status.state is ResizeState.DONE
    assert_kubelet_values(node, "p")
    [rec] = PodStore(node.settings.state_dir).load(persist=False).records
    assert rec.arrival is None and rec.allocated == allocation_of(node.view("p"))
    assert node.violations == []


def _on_disk(node: ResizeNode) -> dict[str, object]:
    return {r.uid: r.allocated for r in PodStore(node.settings.state_dir).load(persist=False).records}


def _in_engine(eng: ResizeEngine) -> dict[str, object]:
    pods = eng.effective_pods()
    return {p.uid: allocation_of(p) for p in pods}


def test_every_record_a_pod_event_changes_is_on_disk_after_its_pass(node: ResizeNode) -> None:
    node.add_pod(manifest("p", [ctr("c", lim={"cpu": "300m", "memory": "128Mi"})]))
    node.add_pod(manifest("q", [ctr("c", lim={"cpu": "200m", "memory": "64Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()  # the first, node-wide pass
    assert _on_disk(node) == _in_engine(eng)

    node.resize("p", {"c": {"limits": {"cpu": "400m", "memory": "160Mi"}}})  # admitted and actuated
    eng.update(node.view("p"))
    eng.reconcile(full=False)
    status = eng.status(node.view("p").uid)
    assert status is not None and status.state is ResizeState.DONE
    assert _on_disk(node) == _in_engine(eng)

    node.add_pod(manifest("r", [ctr("c", lim={"cpu": "100m", "memory": "64Mi"})]))  # a new pod
    eng.update(node.view("r"))
    eng.reconcile(full=False)
    assert _on_disk(node) == _in_engine(eng)

    gone = node.view("q").uid
    node.remove_pod("q")
    eng.remove(gone)
    eng.reconcile(full=False)
    assert gone not in _on_disk(node)
    assert _on_disk(node) == _in_engine(eng)


def test_a_resize_admitted_by_another_pods_event_is_on_disk_before_its_first_write(node: ResizeNode) -> None:
    """Pod b's event shrinks b, which frees the capacity a's queued resize waited for: a is admitted in
    b's pass although its own pod did not change, and its record is durable before any write of a."""
    node.set_allocatable("cpu=2,memory=2Gi")
    node.add_pod(manifest("a", [ctr("app", lim={"cpu": "1", "memory": "512Mi"})]))
    node.add_pod(manifest("b", [ctr("app", lim={"cpu": "1", "memory": "512Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize("a", {"app": {"limits": {"cpu": "1500m", "memory": "512Mi"}}})
    eng.update(node.view("a"))
    eng.reconcile(full=False)
    a = node.view("a")
    status = eng.status(a.uid)
    assert status is not None and status.state is ResizeState.DEFERRED

    seen: list[object] = []
    a_dir = node.pod_path("a", "cpu.cfs_quota_us").rpartition("/")[0]

    def on_event(event: Event) -> None:
        if event.kind == "write" and event.target.startswith(a_dir) and not seen:
            seen.append(_on_disk(node)[a.uid])

    node.on_event = on_event
    node.resize("b", {"app": {"limits": {"cpu": "500m", "memory": "512Mi"}}})
    eng.update(node.view("b"))
    eng.reconcile(full=False)
    status = eng.status(a.uid)
    assert status is not None and status.state is ResizeState.DONE
    assert seen == [allocation_of(a)]  # the new allocation was on disk at a's first write
    assert _on_disk(node) == _in_engine(eng)


def _arrival_on_disk(node: ResizeNode, uid: str) -> int | None:
    [rec] = [r for r in PodStore(node.settings.state_dir).load(persist=False).records if r.uid == uid]
    return rec.arrival


def test_a_pod_events_pass_holds_the_completion_the_node_wide_pass_and_shutdown_write_it(node: ResizeNode) -> None:
    node.add_pod(manifest("p", [ctr("c", lim={"cpu": "300m", "memory": "128Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    uid = node.view("p").uid
    for cpu, finish in (("500m", eng.reconcile), ("400m", EngineReconciler(eng).flush)):
        node.resize("p", {"c": {"limits": {"cpu": cpu, "memory": "192Mi"}}})
        eng.update(node.view("p"))
        eng.reconcile(full=False)
        status = eng.status(uid)
        assert status is not None and status.state is ResizeState.DONE
        assert _arrival_on_disk(node, uid) is not None  # the admitted record: durable, in the queue
        assert _on_disk(node) == _in_engine(eng)  # the allocation on disk is the one applied
        finish()
        assert _arrival_on_disk(node, uid) is None
        assert_kubelet_values(node, "p")
