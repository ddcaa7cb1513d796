"""The daemon's pure parts: the work queue, drift bookkeeping, ownership, watch lines, node sizing,
settings, and the status patch."""

from __future__ import annotations

import json
import threading

import pytest

from agent.config.settings import ConfigError, Settings, from_mapping
from agent.config.values import parse_allocatable
from agent.core.ownership import Owner, Thing, resolve
from agent.daemon.drift import Action, DriftTracker
from agent.infra.queue import TIERS, ShutDown, WorkQueue
from agent.kube.node import derive_allocatable
from agent.kube.status import CONDITION_TYPE, PodRef, condition_patch
from agent.kube.watch import Bookmark, Change, Failure, Unknown, parse_line

# ---- queue


def test_a_key_queued_many_times_is_handed_out_once() -> None:
    q = WorkQueue()
    for _ in range(5):
        q.add("pod-a")
    q.add(TIERS)
    assert [q.get(), q.get()] == ["pod-a", TIERS]
    assert len(q) == 0


def test_a_key_added_while_processed_comes_back_after_done_never_to_a_second_worker() -> None:
    q = WorkQueue()
    q.add("pod-a")
    assert q.get() == "pod-a"
    q.add("pod-a")  # a newer state arrives while the worker holds it
    assert q.pending() == ()
    q.done("pod-a")
    assert q.get() == "pod-a"


def test_delayed_keys_wait_for_their_time_and_shutdown_wakes_workers() -> None:
    now = [0.0]
    q = WorkQueue(clock=lambda: now[0])
    q.add_after("pod-a", 10.0)
    assert q.pending() == ()
    now[0] = 10.0
    assert q.get() == "pod-a"
    got: list[str] = []

    def worker() -> None:
        try:
            got.append(q.get())
        except ShutDown:
            got.append("shutdown")

    t = threading.Thread(target=worker)
    t.start()
    q.shutdown()
    t.join(timeout=5)
    assert got == ["shutdown"]


# ---- drift


def test_drift_is_reapplied_with_backoff_then_yielded_once() -> None:
    d = DriftTracker(max_reverts=2, backoff_s=10.0)
    path = "cpu/kubepods/burstable/cpu.shares"
    assert d.decide(path, "256", 0.0).action is Action.APPLY  # a new desired value: not drift
    d.wrote(path, "256", 0.0)
    first = d.decide(path, "256", 1.0)  # changed back by someone
    assert (first.action, first.drift, first.wait_s) == (Action.HOLD, True, 9.0)
    assert d.decide(path, "256", 10.0).action is Action.APPLY
    d.wrote(path, "256", 10.0)
    assert d.decide(path, "256", 31.0).action is Action.APPLY  # second revert, 20 s backoff passed
    d.wrote(path, "256", 31.0)
    assert d.decide(path, "256", 100.0).action is Action.YIELD
    assert d.decide(path, "256", 200.0).action is Action.YIELDED
    assert d.yielded == (path,)
    assert d.decide(path, "512", 300.0).action is Action.APPLY  # a new desired value: fight again


def test_drift_records_survive_a_restart_through_the_checkpoint() -> None:
    d = DriftTracker(max_reverts=1)
    d.decide("p", "1", 0.0)
    d.wrote("p", "1", 0.0)
    restored = DriftTracker(max_reverts=1)
    restored.restore(json.loads(json.dumps(d.snapshot())))
    assert restored.decide("p", "1", 0.0).action is Action.APPLY  # first revert, backoff long passed
    restored.wrote("p", "1", 0.0)
    assert restored.decide("p", "1", 1e9).action is Action.YIELD


# ---- ownership


@pytest.mark.parametrize(
    ("version", "gates", "thing", "owner"),
    [
        ("v1.33.2", {}, Thing.CONTAINER_RESIZES, Owner.KUBELET),
        ("v1.33.2", {"InPlacePodVerticalScaling": False}, Thing.CONTAINER_RESIZES, Owner.AGENT),
        ("v1.30.0", {}, Thing.CONTAINER_RESIZES, Owner.AGENT),
        ("v1.30.0", {"InPlacePodVerticalScaling": True}, Thing.CONTAINER_RESIZES, Owner.KUBELET),
        ("v1.30.0", {}, Thing.POD_CGROUPS, Owner.AGENT),
        ("v1.34.1", {}, Thing.POD_LEVEL_LIMITS, Owner.KUBELET),
        ("v1.33.0", {}, Thing.POD_LEVEL_LIMITS, Owner.AGENT),
        ("v1.36.2", {}, Thing.QOS_RESERVED_MEMORY, Owner.AGENT),
        ("v1.36.2", {"QOSReserved": True}, Thing.QOS_RESERVED_MEMORY, Owner.KUBELET),
        ("v1.36.2", {}, Thing.QOS_TIERS, Owner.AGENT),
        (None, {}, Thing.CONTAINER_RESIZES, Owner.AGENT),
    ],
)
def test_auto_ownership_follows_the_kubelet(version: str | None, gates: dict[str, bool], thing: Thing, owner: Owner) -> None:
    assert resolve({}, version, gates).owner(thing) is owner


def test_explicit_ownership_and_observe_only_win_over_auto() -> None:
    o = resolve({"containerResizes": "agent", "qosTiers": "observe"}, "v1.35.0", {})
    assert o.owner(Thing.CONTAINER_RESIZES) is Owner.AGENT and o.owner(Thing.QOS_TIERS) is Owner.OBSERVE
    assert all(resolve({}, None, {}, observe_only=True).owner(t) is Owner.OBSERVE for t in Thing)


# ---- watch lines


def test_watch_lines_parse_to_changes_bookmarks_and_errors() -> None:
    pod = {"metadata": {"uid": "u", "name": "p", "namespace": "n", "resourceVersion": "7"}}
    assert parse_line(json.dumps({"type": "MODIFIED", "object": pod})) == Change("MODIFIED", pod, "7")
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert parse_line(json.dumps(bookmark)) == Bookmark("9")
    gone = {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
    assert parse_line(json.dumps(gone)) == Failure(410, "too old")
    assert isinstance(parse_line('{"type": "WHATEVER"}'), Unknown)
    assert isinstance(parse_line("not json"), Unknown)
    assert parse_line("   ") is None


# ---- node sizing


NODE = {
    "status": {
        "capacity": {"cpu": "8", "memory": "16Gi"},
        "allocatable": {"cpu": "7800m", "memory": str(16 * 2**30 - 612 * 2**20)},
    }
}


def test_allocatable_is_capacity_minus_reserved_when_the_reservations_are_known() -> None:
    s = Settings(kube_reserved=parse_allocatable("cpu=100m,memory=256Mi"), system_reserved=parse_allocatable("cpu=100m,memory=256Mi"))
    alloc, how = derive_allocatable(NODE, s)
    assert (alloc and alloc.cpu_milli, alloc and alloc.memory) == (7800, 16 * 2**30 - 512 * 2**20)
    assert "kubeReserved" in how


def test_without_reservations_the_eviction_threshold_is_added_back_to_status_allocatable() -> None:
    alloc, how = derive_allocatable(NODE, Settings())
    assert alloc is not None and alloc.memory == 16 * 2**30 - 512 * 2**20 and alloc.cpu_milli == 7800
    assert "evictionHard" in how
    alloc, _ = derive_allocatable(NODE, Settings(allocatable=parse_allocatable("cpu=2,memory=1Gi")))
    assert alloc is not None and alloc.cpu_milli == 2000


# ---- settings and status


def test_every_config_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        from_mapping(
            {"metricsBindAddress": "everywhere", "workers": 0, "driftMaxReverts": "x", "bogus": 1, "logFormat": "xml"}
        )
    assert len(err.value.problems) == 5
    assert any("metricsBindAddress" in p for p in err.value.problems)


def test_the_condition_patch_touches_only_the_agents_condition() -> None:
    body = condition_patch(PodRef("ns", "p", "uid-1"), True, "Done", "ok", "2026-01-01T00:00:00Z")
    assert body["metadata"] == {"uid": "uid-1"}
    assert list(body["status"]) == ["conditions"]
    [cond] = body["status"]["conditions"]
    assert cond["type"] == CONDITION_TYPE and cond["status"] == "True"


# ---- log lines


def test_a_warning_is_logged_when_it_appears_not_on_every_pass_it_persists() -> None:
    """A node without hugetlb in one hierarchy says so once, not in every pass's log line; a warning that
    goes away and comes back is logged again."""
    from typing import Any, cast

    from structlog.testing import capture_logs

    from agent.daemon.core import Daemon
    from agent.daemon.reconciler import Outcome, Report
    from agent.infra.metrics import Metrics

    daemon = Daemon(cast(Any, None), cast(Any, None), cast(Any, None), Metrics(), node=None, resync_period_s=60.0)
    passes = [("w1",), ("w1",), ("w1", "w2"), (), ("w1",)]
    with capture_logs() as logs:
        for warnings in passes:
            daemon._finish("tiers", None, Report("tiers", Outcome.CONVERGED, warnings=warnings), 0.0)
    lines = [e for e in logs if e["event"] == "reconcile"]
    assert [e.get("warnings") for e in lines] == [["w1"], None, ["w2"], None, ["w1"]]
    assert [e["log_level"] for e in lines] == ["info", "debug", "info", "debug", "info"]


def test_the_contested_records_are_exactly_those_with_reverts_or_yielded() -> None:
    """`contested` is kept as records change; it must always equal the filter over every record."""
    import random

    rng = random.Random(7)
    d = DriftTracker(max_reverts=2)
    paths = [f"cpu/p{i}/cpu.shares" for i in range(6)]
    for step in range(2000):
        p = rng.choice(paths)
        op = rng.choices(range(6), weights=(10, 10, 2, 1, 1, 1))[0]
        value = "2" if rng.random() < 0.05 else "1"  # mostly one desired value: reverts accumulate
        if op == 0:
            d.decide(p, value, float(step))
        elif op == 1:
            d.wrote(p, value, float(step))
        elif op == 2:
            d.converged(p, value)
        elif op == 3:
            d.forget([p])
        elif op == 4:
            d.forget_under("p3")
        else:
            d.restore(json.loads(json.dumps(d.snapshot())))
        want = {q: r for q, r in d.snapshot().items() if r["reverts"] or r["yielded"]}
        assert d.contested() == want, step
    assert d.contested()  # the walk did reach contested records
