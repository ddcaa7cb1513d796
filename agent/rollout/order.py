"""Which of this node's pods may start their update now (pure), keeping the rollout's rules across nodes.

Each node's agent sees every pod of the workload (from the API) but acts only on its own. The rules are
the controllers' own, so that the rollout looks the same as a stock one:
- StatefulSet (RollingUpdate): ordinals at or above the partition, highest first; a pod is next only when
  every higher ordinal is at the update revision, and at most `max_unavailable` pods are unavailable
  (not Ready, or being updated) — with the default of 1: the next one waits until every higher one is
  updated and Ready.
- DaemonSet: any pod not at the update revision, at most `max_unavailable` unavailable at a time.
A pod at the update revision that failed to become Ready halts the rollout: nothing more starts.
The budget is enforced across nodes by Leases (one per slot); this module says only who may ask for one.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass


class WorkloadKind(enum.StrEnum):
    STATEFUL_SET = "StatefulSet"
    DAEMON_SET = "DaemonSet"

    @property
    def plural(self) -> str:
        """The resource's name in API paths (`apps/v1` statefulsets, daemonsets)."""
        return self.value.lower() + "s"


@dataclass(frozen=True, slots=True)
class PodState:
    name: str
    node: str
    revision: str  # the controller-revision-hash label
    ready: bool
    ordinal: int | None = None  # StatefulSet pods: the number after the last dash
    updating: bool = False  # an update of this pod is in flight (a slot is held for it)
    failed: bool = False  # at the update revision and not Ready within the deadline: halts the rollout
    terminating: bool = False


@dataclass(frozen=True, slots=True)
class Rollout:
    kind: WorkloadKind
    update_revision: str
    replicas: int
    max_unavailable: int = 1
    partition: int = 0


@dataclass(frozen=True, slots=True)
class Turn:
    """For one pod of this node: may it start now, and if not, why it waits (for `rollout status`)."""

    pod: str
    go: bool
    reason: str


def max_unavailable(value: object, total: int) -> int:
    """An int or "N%" of `total`, rounded up, at least 1 (RollingUpdateDaemonSet's rule); ValueError else."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number or a percentage")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.endswith("%") and value[:-1].isascii() and value[:-1].isdigit():
        n = math.ceil(int(value[:-1]) * total / 100)
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        n = int(value)
    else:
        raise ValueError(f"{value!r} is not a number or a percentage like 25%")
    if n < 0:
        raise ValueError(f"{value!r} is negative")
    return max(n, 1)


def ordinal(name: str) -> int | None:
    """A StatefulSet pod's ordinal: the digits after its last dash."""
    _, _, tail = name.rpartition("-")
    return int(tail) if tail.isascii() and tail.isdigit() else None


def slots(rollout: Rollout, pods: Sequence[PodState]) -> int:
    """How many update slots (Leases) may be held at once now: the budget less the pods unavailable for
    another reason (not Ready, terminating) — so that slots in flight plus those never exceed it."""
    other = sum(1 for p in pods if not p.updating and (p.terminating or not p.ready))
    return max(0, rollout.max_unavailable - other)


def _unavailable(pods: Sequence[PodState]) -> int:
    return sum(1 for p in pods if p.updating or p.terminating or not p.ready)


def turns(rollout: Rollout, pods: Sequence[PodState], node: str | None) -> list[Turn]:
    """This node's pods (every node's with None: the keeper's handout) that are not at the update revision,
    each with whether it may start now."""
    halted = [p.name for p in pods if p.failed]
    budget = rollout.max_unavailable - _unavailable(pods)
    out: list[Turn] = []
    if rollout.kind is WorkloadKind.STATEFUL_SET:
        ranked = sorted((p for p in pods if p.ordinal is not None), key=lambda p: -(p.ordinal or 0))
        behind: list[str] = []  # higher ordinals not yet at the update revision
        for p in ranked:
            assert p.ordinal is not None
            pending = p.revision != rollout.update_revision
            if pending and p.ordinal < rollout.partition:
                if p.node == node:
                    out.append(Turn(p.name, False, f"below the partition ({rollout.partition}): keeps its revision"))
                continue
            if pending and (node is None or p.node == node):
                out.append(_turn(p, halted, behind, budget))
                if out[-1].go and p.ready:
                    budget -= 1
            if pending and not p.updating:
                behind.append(p.name)
        return out
    for p in sorted(pods, key=lambda p: p.name):
        if p.revision != rollout.update_revision and (node is None or p.node == node):
            out.append(_turn(p, halted, [], budget))
            if out[-1].go and p.ready:
                budget -= 1
    return out


def _turn(p: PodState, halted: list[str], behind: list[str], budget: int) -> Turn:
    if p.updating:
        return Turn(p.name, False, "being updated")
    if halted:
        return Turn(p.name, False, f"halted: {', '.join(halted)} did not become Ready at the update revision")
    if behind:
        return Turn(p.name, False, f"waiting for {behind[0]} (a higher ordinal) to be updated")
    if budget + (0 if p.ready and not p.terminating else 1) <= 0:  # an unavailable pod costs nothing more
        return Turn(p.name, False, "waiting: as many pods are unavailable as the rollout allows")
    return Turn(p.name, True, "next")
