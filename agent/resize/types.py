"""The resize vocabulary: the three states of a pod's resources and the resize state machine's states.

Desired is what the pod spec (or the resize annotation) asks for; allocated is what the agent admitted
and checkpointed; actual is read back from the kernel. A `PodAllocation` holds exactly the resizable
part of a pod — per-container requests and limits, pod-level requests and limits — so that desired and
allocated compare with `==` and the rest of the PodView (status, overhead) stays the observed one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from agent.core.model import EMPTY, PodUID, Resources


class ResizeState(enum.StrEnum):
    PROPOSED = "Proposed"  # a new desired state arrived and waits for admission
    IN_PROGRESS = "InProgress"  # admitted (allocated), being actuated or held back (memory usage, restart)
    DEFERRED = "Deferred"  # does not fit now; retried when capacity frees and periodically
    INFEASIBLE = "Infeasible"  # can never be done as asked; retried only when the desired state changes
    DONE = "Done"  # desired == allocated == actual
    ERROR = "Error"  # a step failed; retried with exponential backoff


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    name: str
    requests: Resources = EMPTY
    limits: Resources = EMPTY


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """The resizable resources of one pod. `init_containers` holds every init container (sidecars are
    resizable, the others are not, which admission checks)."""

    containers: tuple[ContainerAllocation, ...]
    init_containers: tuple[ContainerAllocation, ...] = ()
    pod_requests: Resources | None = None
    pod_limits: Resources | None = None

    def container(self, name: str) -> ContainerAllocation | None:
        for c in (*self.init_containers, *self.containers):
            if c.name == name:
                return c
        return None


@dataclass(frozen=True, slots=True)
class ResizeStatus:
    """What the daemon reports for one pod (and `plan`/`explain` show): a state with reason and message.

    `reason` is a short CamelCase word a machine can match (like a condition reason), `message` one
    line for a person. `attempts` counts failed actuation attempts since the last success."""

    uid: PodUID
    pod: str
    state: ResizeState
    reason: str = ""
    message: str = ""
    desired: PodAllocation | None = None
    allocated: PodAllocation | None = None
    attempts: int = 0
    restarted: dict[str, str] = field(default_factory=dict)  # container -> ID stopped for RestartContainer

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "state": self.state.value,
            "reason": self.reason,
            "message": self.message,
            "attempts": self.attempts,
        }
