"""The seam between the daemon loop and what it runs: a small `Reconciler` protocol and its reports.

Why a protocol: the loop (queue, workers, resync, reporting) does not care how one pod is brought to
its desired state, and tests drive a reconciler without the loop. The one implementation is the resize
engine behind the ownership table and the drift gate (`agent.daemon.engine_reconciler`), on every node.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from agent.core.compute import ComputeConfig, PodComputation, PodComputeError, compute_pod
from agent.core.compute.aggregate import pod_level_resources_set
from agent.core.model import PodUID, PodView
from agent.pipeline.execute import Shortfall
from agent.resize.types import ResizeState, ResizeStatus

__all__ = ["ResizeState", "ResizeStatus"]  # the resize engine's vocabulary, shared by every reconciler

StopRequested = Callable[[], bool]
"""Asked between steps: True once the daemon is stopping (finish the current step, then stop)."""


class Outcome(enum.StrEnum):
    CONVERGED = "converged"  # nothing differed (or only values the agent does not own)
    APPLIED = "applied"  # differences written
    WAITING = "waiting"  # the pod's cgroup is not there yet (the kubelet has not created it)
    DEFERRED = "deferred"  # held back for now (memory below usage, drift backoff): retried later
    FAILED = "failed"  # a step failed: retried with backoff
    INVALID = "invalid"  # the pod cannot be computed: reported, not retried until it changes
    INTERRUPTED = "interrupted"  # the daemon is stopping: the rest is done by the next start
    FORGOTTEN = "forgotten"  # the pod is gone


@dataclass(frozen=True, slots=True)
class PodEventNote:
    """An Event to put on a pod: the pod of the pass, or the pod with UID `uid` (node-wide passes)."""

    reason: str
    message: str
    warning: bool = False
    uid: str | None = None


# The Event a pod gets when its resize enters a state (None: no Event for that state).
_EVENTS: dict[ResizeState, tuple[str, bool]] = {
    ResizeState.IN_PROGRESS: ("ResizeAccepted", False),
    ResizeState.DEFERRED: ("ResizeDeferred", False),
    ResizeState.INFEASIBLE: ("ResizeInfeasible", True),
    ResizeState.DONE: ("ResizeDone", False),
    ResizeState.ERROR: ("ResizeFailed", True),
}


def event_for(status: ResizeStatus, previous: ResizeStatus | None) -> PodEventNote | None:
    """An Event when the state (or, for the non-final states, the reason) changed; pure."""
    known = _EVENTS.get(status.state)
    if known is None:
        return None
    if (
        previous is not None
        and previous.state is status.state
        and (status.state is ResizeState.DONE or previous.reason == status.reason)
    ):
        return None
    reason, warning = known
    return PodEventNote(reason, status.message or status.reason, warning, status.uid)


def compute_or_note(pod: PodView, cfg: ComputeConfig) -> PodComputation | tuple[str, str]:
    """The pod's values, or (Event reason, message) when it cannot be computed (bad input, not a bug)."""
    try:
        return compute_pod(pod, cfg)
    except PodComputeError as err:
        reason = "InvalidPodLevelLimits" if pod_level_resources_set(pod) else "InvalidResources"
        return reason, err.message


@dataclass(frozen=True, slots=True)
class DriftNote:
    thing: str
    path: str
    action: str  # reapplied | held | yielded | observed
    message: str
    reverts: int = 0  # a reapplied value: how often it was put back so far (1: once, after one change)


@dataclass(frozen=True, slots=True)
class Report:
    scope: str  # "pod" or "tiers"
    outcome: Outcome
    writes: int = 0
    changed: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()  # (error class, message)
    warnings: tuple[str, ...] = ()
    retry_after_s: float | None = None
    events: tuple[PodEventNote, ...] = ()
    statuses: tuple[ResizeStatus, ...] = ()  # resize states that changed in this pass (for the condition)
    drift: tuple[DriftNote, ...] = ()
    shortfalls: tuple[Shortfall, ...] = ()  # tier memory limits set at usage in this pass


class Reconciler(Protocol):
    def start(self, pods: Sequence[PodView]) -> list[str]:
        """Called once with the first full pod list, before any reconcile; returns warnings to log."""
        ...

    def reconcile_pod(self, pod: PodView, stop: StopRequested) -> Report:
        """Bring one pod's cgroups and containers to the pod's latest desired state."""
        ...

    def reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        """Bring the QoS tiers (kubepods, burstable, besteffort) to what these pods need."""
        ...

    def forget_pod(self, uid: PodUID) -> None:
        """The pod left the node: drop what is kept about it."""
        ...

    def status(self, uid: PodUID) -> ResizeStatus | None:
        """The pod's last resize state, if it was ever resized."""
        ...

    def states(self) -> dict[str, int]:
        """How many pods are in each resize state (for the metrics)."""
        ...

    def flush(self) -> None:
        """Write the checkpoint (at shutdown, and after state changes)."""
        ...

    def view_behind(self, reason: str | None) -> None:
        """The pods' view may be behind (`reason`: the watch broke) or is current again (None)."""
        ...

    def stale(self, pods: Sequence[PodView]) -> set[str]:
        """At a resync: the pods that need their own pass (changed or not converged when last passed, or
        whose files differ now). The tiers item always runs; anything else is left alone."""
        ...
