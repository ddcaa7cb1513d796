"""Who may start updating now: the StatefulSet order (highest ordinal first, the next only when every
higher one is updated and Ready), the partition, the DaemonSet budget, the halt; and, as properties over
random rollouts, the budget is never exceeded and no pod goes before a higher ordinal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.rollout.order import PodState, Rollout, WorkloadKind, max_unavailable, ordinal, slots, turns

NEW, OLD = "rev-2", "rev-1"
STS, DS = WorkloadKind.STATEFUL_SET, WorkloadKind.DAEMON_SET


def sts_pod(i: int, node: str, rev: str = OLD, ready: bool = True, **kw: bool) -> PodState:
    return PodState(f"db-{i}", node, rev, ready, ordinal=i, **kw)


def test_a_statefulset_goes_from_the_highest_ordinal_down_one_at_a_time() -> None:
    ro = Rollout(STS, NEW, 3)
    pods = [sts_pod(0, "a"), sts_pod(1, "b"), sts_pod(2, "a")]
    assert [(t.pod, t.go) for t in turns(ro, pods, "a")] == [("db-2", True), ("db-0", False)]
    assert turns(ro, pods, "b")[0].reason == "waiting for db-2 (a higher ordinal) to be updated"
    # db-2 updated but not Ready yet: db-1 waits (the budget of 1 is used by db-2)
    pods[2] = sts_pod(2, "a", NEW, ready=False)
    [t] = turns(ro, pods, "b")
    assert not t.go and "unavailable" in t.reason
    pods[2] = sts_pod(2, "a", NEW)  # Ready: db-1's turn
    assert [(t.pod, t.go) for t in turns(ro, pods, "b")] == [("db-1", True)]


def test_the_partition_keeps_lower_ordinals() -> None:
    ro = Rollout(STS, NEW, 3, partition=2)
    pods = [sts_pod(0, "a"), sts_pod(1, "a"), sts_pod(2, "a", NEW)]
    assert all(not t.go and "partition" in t.reason for t in turns(ro, pods, "a"))


def test_two_unavailable_allowed_lets_the_next_ordinal_start_while_the_first_updates() -> None:
    ro = Rollout(STS, NEW, 3, max_unavailable=2)
    pods = [sts_pod(0, "a"), sts_pod(1, "a"), sts_pod(2, "a", NEW, ready=False)]
    assert [(t.pod, t.go) for t in turns(ro, pods, "a")] == [("db-1", True), ("db-0", False)]


def test_a_pod_not_ready_at_the_old_revision_is_updated_without_spending_budget() -> None:
    ro = Rollout(STS, NEW, 2)
    pods = [sts_pod(0, "a"), sts_pod(1, "a", ready=False)]  # db-1 is crash-looping at the old revision
    assert [(t.pod, t.go) for t in turns(ro, pods, "a")] == [("db-1", True), ("db-0", False)]


def test_a_failed_pod_halts_the_rollout() -> None:
    ro = Rollout(DS, NEW, 3, max_unavailable=3)
    pods = [PodState("ds-a", "a", NEW, False, failed=True), PodState("ds-b", "b", OLD, True)]
    [t] = turns(ro, pods, "b")
    assert not t.go and t.reason == "halted: ds-a did not become Ready at the update revision"


def test_a_daemonset_updates_at_most_max_unavailable_at_a_time() -> None:
    ro = Rollout(DS, NEW, 4, max_unavailable=2)
    pods = [PodState(f"ds-{i}", "n", OLD, True) for i in range(4)]
    assert [t.go for t in turns(ro, pods, "n")] == [True, True, False, False]
    pods[0] = PodState("ds-0", "n", OLD, True, updating=True)
    got = turns(ro, pods, "n")
    assert [t.go for t in got] == [False, True, False, False] and got[0].reason == "being updated"


@pytest.mark.parametrize(("value", "total", "expected"), [(1, 10, 1), ("3", 10, 3), ("25%", 10, 3), ("10%", 5, 1), ("0%", 5, 1), (0, 5, 1), ("100%", 7, 7)])
def test_max_unavailable(value: object, total: int, expected: int) -> None:
    # a percentage of the pods, rounded up; never 0 (RollingUpdateDaemonSet: "This cannot be 0. Default 1")
    assert max_unavailable(value, total) == expected


@pytest.mark.parametrize("value", ["x", "-1", "1.5", "%", True, None, -2, "٣"])
def test_max_unavailable_rejects(value: object) -> None:
    with pytest.raises(ValueError):
        max_unavailable(value, 10)


def test_ordinal() -> None:
    assert (ordinal("web-12"), ordinal("web"), ordinal("web-x"), ordinal("a-b-3")) == (12, None, None, 3)


pod_states = st.builds(
    lambda i, node, new, ready, updating: (i, node, new, ready, updating),
    st.integers(0, 7), st.sampled_from("abc"), st.booleans(), st.booleans(), st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(pod_states, min_size=1, max_size=8, unique_by=lambda t: t[0]),
    st.integers(1, 3),
    st.sampled_from([STS, DS]),
    st.randoms(use_true_random=False),
)
def test_with_one_lease_per_slot_the_budget_is_never_exceeded_and_no_ordinal_is_skipped(
    raw: list[tuple[int, str, bool, bool, bool]], mu: int, kind: WorkloadKind, rnd: object
) -> None:
    """Each node asks for a slot for each of its pods that may go; the Leases grant at most `slots()`
    in all (the budget less the pods unavailable for another reason), each pod in flight holding one (a not-Ready pod being replaced costs
    none: it was unavailable already). Whatever order the nodes ask in: never more unavailable pods than
    allowed (or than were already), and no StatefulSet pod before a higher ordinal that is behind."""
    import random

    assert isinstance(rnd, random.Random)
    pods = [sts_pod(i, node, NEW if new else OLD, ready, updating=updating and not new) for i, node, new, ready, updating in raw]
    ro = Rollout(kind, NEW, len(pods), max_unavailable=mu)
    asks = [t.pod for node in "abc" for t in turns(ro, pods, node) if t.go]
    rnd.shuffle(asks)
    held = sum(1 for p in pods if p.updating)
    by_name = {p.name: p for p in pods}
    granted = []
    capacity = slots(ro, pods)
    for name in asks:  # a node takes a free slot Lease or waits
        costs = by_name[name].ready
        if not costs or held < capacity:
            granted.append(name)
            held += costs
    unavailable_before = {p.name for p in pods if p.updating or not p.ready}
    assert len(unavailable_before | set(granted)) <= max(mu, len(unavailable_before))
    for node in "abc":  # each node alone never asks beyond the budget it sees
        spend = [t for t in turns(ro, pods, node) if t.go and by_name[t.pod].ready]
        assert len(spend) <= max(0, mu - len(unavailable_before))
    if kind is STS:
        for name in granted:
            me = by_name[name]
            assert me.ordinal is not None
            assert all(p.revision == NEW or p.updating for p in pods if (p.ordinal or 0) > me.ordinal)
