"""`rollout status` rows (pure): a pod failed at the update revision halts the others, a recreated pod
is "updated", the rollout is complete only when every pod is updated and Ready."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.rollout.order import WorkloadKind
from agent.rollout.report import status, table
from agent.rollout.workload import Policy, Workload

NOW = 1_800_000_000.0
W = Workload(WorkloadKind.DAEMON_SET, "kube-system", "agent", "uid-ds", Policy.IN_PLACE_IF_POSSIBLE, {"app": "x"}, 3, 4, None)


def _pod(name: str, node: str, rev: str, ready: bool, gate: str | None = None, since: float = NOW, created: float = NOW) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if gate is not None:
        conds.append({"type": "kube-cgroup-agent.io/InPlaceUpdateReady", "status": gate,
                      "lastTransitionTime": datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
    return {"metadata": {"name": name, "labels": {"controller-revision-hash": rev},
                         "creationTimestamp": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
            "spec": {"nodeName": node}, "status": {"conditions": conds}}


def test_a_failed_pod_halts_the_rest() -> None:
    pods = [
        _pod("agent-a", "a", "new", False, gate="False", since=NOW - 600),  # updated in place 10 min ago, never Ready
        _pod("agent-b", "b", "old", True),
        _pod("agent-c", "c", "new", True, created=NOW - 60),  # recreated at the new revision
    ]
    st = status(W, pods, "new", NOW, 300)
    rows = {r.pod: r for r in st.rows}
    assert rows["agent-a"].state == "failed"
    assert rows["agent-b"].state == "halted" and "agent-a" in rows["agent-b"].reason
    assert rows["agent-c"].state == "updated"
    assert st.updated == 1 and not st.complete
    assert "1/3 pods updated" in table(st)


def test_complete_when_every_pod_is_updated_and_ready() -> None:
    pods = [_pod("agent-a", "a", "new", True, gate="True"), _pod("agent-b", "b", "new", True)]
    st = status(W, pods, "new", NOW, 300)
    assert st.complete and st.to_json()["complete"] is True
    pods[1] = _pod("agent-b", "b", "new", False, created=NOW - 10)  # recreated, not Ready yet (not failed: 10 s)
    st = status(W, pods, "new", NOW, 300)
    assert not st.complete and {r.state for r in st.rows} == {"updated"}


def test_a_daemonset_pod_waits_for_the_keepers_turn_and_then_its_agent() -> None:
    """A DaemonSet's turns are the keeper's: a pod that may go next but has no turn yet says the keeper gives
    it; one with the turn says its agent takes it up; one beyond the budget waits for it."""
    given = _pod("agent-a", "a", "old", True)
    given["metadata"]["annotations"] = {"kube-cgroup-agent.io/rollout-turn": "new"}
    wide = Workload(WorkloadKind.DAEMON_SET, "kube-system", "agent", "uid-ds", Policy.IN_PLACE_IF_POSSIBLE, {"app": "x"}, 3, 4, None, 2)
    rows = {r.pod: r for r in status(wide, [given, _pod("agent-b", "b", "old", True), _pod("agent-c", "c", "old", True)],
                                     "new", NOW, 300).rows}
    assert "the keeper's" in rows["agent-a"].reason
    assert "the cluster's keeper gives it its turn" in rows["agent-b"].reason
    assert "as many pods are unavailable" in rows["agent-c"].reason
