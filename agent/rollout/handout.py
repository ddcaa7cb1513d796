"""A DaemonSet's rollout as the cluster's one keeper hands it out (pure): whose turn starts now, whose is over.

Why a keeper and not every node: a DaemonSet has a pod on every node. Were each node to watch it and list its
pods to find its own turn, every step of a rollout over N nodes would reach N agents (N² over the rollout)
and N agents would race for the budget's Leases at every change. The keeper — one per cluster; it watches the
DaemonSets that opt in and, only while one of them rolls out, that one's pods — writes the turn on the pods
whose turn it is (`kube-cgroup-agent.io/rollout-turn: <update revision hash>`). A node learns its turn from
the watch of its own pods that it has anyway, reads the DaemonSet and its revision once, and updates the pod
as before (agent.daemon.rollout); the slot Leases stay as a guard (two keepers for a moment, while the keeper
itself is updated, cannot exceed the budget).

A turn is over when its pod runs Ready at the revision (or the pod is gone), or when its revision is no longer
the update revision and nothing is in flight on it. A turn never begun within `start_s` (the node's agent is
down) is taken back and the pod rests while the others go, so that one dead agent does not stall the rollout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from agent.rollout.order import PodState, Rollout, turns
from agent.rollout.steps import gate_of, is_failed
from agent.rollout.workload import PREFIX, pod_state

TURN: Final = PREFIX + "rollout-turn"  # on a DaemonSet's pod: the update revision hash it may go to now
START_S: Final = 300.0  # a turn not begun in this long is taken back


@dataclass(frozen=True, slots=True)
class Handout:
    grant: tuple[str, ...]  # pods to be given the turn (their names)
    clear: tuple[str, ...]  # pods whose turn annotation goes (done, stale, or taken back)
    taken_back: tuple[str, ...]  # of `clear`, the turns never begun in time
    halted: tuple[str, ...]  # pods failed at the update revision: nothing more is handed out


def turn_of(raw: Mapping[str, Any]) -> str | None:
    """The revision hash a pod's turn is for, if it has one."""
    value = ((raw.get("metadata") or {}).get("annotations") or {}).get(TURN)
    return str(value) if isinstance(value, str) and value else None


def _in_flight(raw: Mapping[str, Any]) -> bool:
    """A node's update of the pod has begun and is not finished: its InPlaceUpdateReady condition is False."""
    gate = gate_of(raw)
    return gate is not None and gate.get("status") == "False"


def handout(
    rollout: Rollout,
    pods: Sequence[Mapping[str, Any]],
    now: float,
    granted_at: Mapping[str, float],
    resting: frozenset[str],
    ready_timeout_s: float,
    start_s: float = START_S,
) -> Handout:
    """The turns to write and clear for one DaemonSet at `rollout.update_revision`.

    `granted_at`: pod name -> when the keeper gave its turn (a turn it did not give, as after the keeper's
    restart, counts from now); `resting`: pods whose turn was taken back lately, handed none until their rest
    is over (the others go first)."""
    update = rollout.update_revision
    states: list[PodState] = []
    clear: list[str] = []
    taken_back: list[str] = []
    holding: set[str] = set()
    for raw in pods:
        meta = raw.get("metadata") or {}
        name = str(meta.get("name"))
        node = str((raw.get("spec") or {}).get("nodeName") or "")
        state = pod_state(raw, node, is_failed(raw, update, now, ready_timeout_s))
        turn = turn_of(raw)
        updating = False
        if turn is not None and turn != update:
            if _in_flight(raw):
                updating = True  # an earlier revision's update still running there: it keeps its place
            else:
                clear.append(name)
        elif turn == update:
            at = state.revision == update
            if at and state.ready:
                clear.append(name)  # done
            elif not at and not _in_flight(raw) and now - granted_at.get(name, now) > start_s:
                clear.append(name)
                taken_back.append(name)
            else:
                updating = True
                holding.add(name)
        states.append(replace(state, updating=updating))
    halted = tuple(s.name for s in states if s.failed)
    over = set(clear)
    skip = resting | over
    # a pod left out stays in the count of the unavailable: only a Ready one is left out
    shown = [s for s in states if not (s.name in skip and s.ready and not s.terminating)]
    placed = {s.name for s in states if s.node}  # only a pod bound to a node has an agent to take its turn
    # a pod whose turn is cleared now is handed one again at the next pass
    may = [t.pod for t in turns(rollout, shown, None)
           if t.go and t.pod not in holding and t.pod not in over and t.pod in placed]
    return Handout(tuple(may), tuple(clear), tuple(taken_back), halted)
