"""The keeper's handout of a DaemonSet's turns (agent.rollout.handout): whose turn starts, whose is over,
and that turns plus pods unavailable never exceed the budget."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.rollout.handout import START_S, TURN, handout, turn_of
from agent.rollout.order import Rollout, WorkloadKind
from agent.rollout.workload import READY_GATE

NOW = 1_000_000.0
NEW, OLD = "new1", "old1"


def pod(name: str, revision: str = OLD, ready: bool = True, turn: str | None = None, gate: str | None = None,
        node: str | None = None, terminating: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if gate is not None:
        conditions.append({"type": READY_GATE, "status": gate, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    meta: dict[str, Any] = {"name": name, "uid": f"u-{name}", "labels": {"controller-revision-hash": revision},
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if turn is not None:
        meta["annotations"] = {TURN: turn}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node if node is not None else f"node-{name}"}, "status": {"conditions": conditions}}


def rollout(max_unavailable: int = 1, replicas: int = 3) -> Rollout:
    return Rollout(WorkloadKind.DAEMON_SET, NEW, replicas, max_unavailable)


# (case, pods, max unavailable, granted_at, resting) -> (grant, clear, taken back)
CASES = [
    ("first turn, by name", [pod("c"), pod("a"), pod("b")], 1, {}, frozenset(), (["a"], [], [])),
    ("two at a time", [pod("a"), pod("b"), pod("c")], 2, {}, frozenset(), (["a", "b"], [], [])),
    ("a turn in flight holds the budget", [pod("a", turn=NEW, gate="False", ready=False), pod("b"), pod("c")], 1,
     {"a": NOW}, frozenset(), ([], [], [])),
    ("granted, not begun yet: still held", [pod("a", turn=NEW), pod("b")], 1, {"a": NOW - 10}, frozenset(), ([], [], [])),
    ("done: cleared, the next one goes", [pod("a", NEW, turn=NEW), pod("b"), pod("c")], 1, {"a": NOW - 30}, frozenset(),
     (["b"], ["a"], [])),
    ("at the revision, not Ready yet: held", [pod("a", NEW, ready=False, turn=NEW, gate="False"), pod("b")], 1, {}, frozenset(),
     ([], [], [])),
    ("a pod unavailable for another reason uses the budget", [pod("a", ready=False), pod("b")], 1, {}, frozenset(), (["a"], [], [])),
    ("an earlier revision's turn, over: cleared", [pod("a", turn=OLD), pod("b")], 1, {}, frozenset(), (["b"], ["a"], [])),
    ("an earlier revision's update in flight keeps its place", [pod("a", turn=OLD, gate="False", ready=False), pod("b")], 1, {},
     frozenset(), ([], [], [])),
    ("never begun in time: taken back, the others first", [pod("a", turn=NEW), pod("b"), pod("c")], 1, {"a": NOW - START_S - 1},
     frozenset(), (["b"], ["a"], ["a"])),
    ("a resting pod goes last", [pod("a"), pod("b")], 1, {}, frozenset({"a"}), (["b"], [], [])),
    ("a resting pod waits even alone", [pod("a"), pod("b", NEW)], 1, {}, frozenset({"a"}), ([], [], [])),
    ("an unscheduled pod gets no turn", [pod("a", node=""), pod("b")], 1, {}, frozenset(), ([], [], [])),
    ("all at the revision: nothing", [pod("a", NEW), pod("b", NEW)], 1, {}, frozenset(), ([], [], [])),
]


@pytest.mark.parametrize(("pods", "mu", "granted", "resting", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_handout(pods: list[dict[str, Any]], mu: int, granted: dict[str, float], resting: frozenset[str],
                 want: tuple[list[str], list[str], list[str]]) -> None:
    h = handout(rollout(mu, len(pods)), pods, NOW, granted, resting, ready_timeout_s=300)
    assert (list(h.grant), list(h.clear), list(h.taken_back)) == want


def test_a_pod_failed_at_the_revision_halts_the_handout() -> None:
    failed = pod("a", NEW, ready=False, turn=NEW, gate="False")  # its gate False since 2026-01-01: long past the timeout
    h = handout(rollout(2), [failed, pod("b"), pod("c")], 1.9e9, {}, frozenset(), ready_timeout_s=300)
    assert h.halted == ("a",) and h.grant == ()


def test_turn_of_reads_only_a_non_empty_string() -> None:
    assert turn_of(pod("a", turn=NEW)) == NEW
    assert turn_of(pod("a")) is None
    assert turn_of({"metadata": {"annotations": {TURN: ""}}}) is None


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, dict[str, float]]:
    n = draw(st.integers(1, 8))
    pods, granted = [], {}
    for i in range(n):
        name = f"p{i}"
        revision = draw(st.sampled_from([OLD, NEW]))
        ready = draw(st.booleans())
        turn = draw(st.sampled_from([None, NEW, OLD]))
        gate = draw(st.sampled_from([None, "True", "False"]))
        pods.append(pod(name, revision, ready, turn, gate, terminating=draw(st.booleans()) and not ready))
        if turn == NEW:
            granted[name] = NOW - draw(st.sampled_from([0.0, 10.0, START_S + 1]))
    return pods, draw(st.integers(1, 3)), granted


def _unavailable_after(pods: list[dict[str, Any]], h: Any) -> int:
    """Pods unavailable, or holding a turn once the handout is written (a turn may make its pod unavailable)."""
    out = 0
    for p in pods:
        name = p["metadata"]["name"]
        holds = (turn_of(p) is not None and name not in h.clear) or name in h.grant
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
        done = p["metadata"]["labels"]["controller-revision-hash"] == NEW and ready
        if (holds and not done) or not ready or "deletionTimestamp" in p["metadata"]:
            out += 1
    return out


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_a_handout_never_takes_the_budget_beyond_what_was_unavailable_already(fleet: tuple[list[dict[str, Any]], int, dict[str, float]]) -> None:
    pods, mu, granted = fleet
    h = handout(rollout(mu, len(pods)), pods, NOW, granted, frozenset(), ready_timeout_s=1e12)
    before = _unavailable_after(pods, type("None", (), {"clear": (), "grant": ()})())
    assert not set(h.grant) & set(h.clear)
    assert all(p["metadata"]["labels"]["controller-revision-hash"] != NEW for p in pods if p["metadata"]["name"] in h.grant)
    if h.grant:  # a grant only within the budget: what it adds keeps the unavailable at most max(budget, before)
        assert _unavailable_after(pods, h) <= max(mu, before)
