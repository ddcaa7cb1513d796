"""The plan's vocabulary: the steps (a cgroup file write, a CRI container update, a restart), what a
plan holds back, and the plan itself."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from agent.core.diff import FileDiff, Owner
from agent.core.model import ContainerID, ContainerValues, PodUID, Problem
from cgroupfs.layout import FileSetting
from cgroupfs.types import CgroupName

Resource = Literal["memory", "cpu", "hugetlb"]
RESOURCE_ORDER: tuple[Resource, ...] = ("memory", "cpu", "hugetlb")
INF = math.inf


@dataclass(frozen=True, slots=True)
class CgroupStep:
    """Write one file of a pod or tier cgroup."""

    setting: FileSetting
    current: str | None
    resource: Resource
    owner: Owner
    pod: str | None = None
    kind: Literal["cgroup"] = "cgroup"
    # a QoS tier's qos-reserved memory limit: when the kernel refuses it (usage above), set it at the
    # usage instead and go on, as the kubelet's retrySetMemoryReserve does
    at_usage_on_refusal: bool = False

    @property
    def path(self) -> str:
        return self.setting.path

    def to_json(self) -> dict[str, object]:
        return {"kind": "cgroup", "path": self.path, "from": self.current, "to": self.setting.value}


@dataclass(frozen=True, slots=True)
class ContainerStep:
    """One UpdateContainerResources call: the full value set, with `resource` the one being changed."""

    pod: str
    pod_uid: PodUID
    container: str
    container_id: ContainerID
    resource: Resource
    changes: tuple[FileDiff, ...]
    values: ContainerValues
    kind: Literal["container"] = "container"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": "container",
            "pod": self.pod,
            "container": self.container,
            "containerID": self.container_id,
            "resource": self.resource,
            "from": {c.desired.field: c.current for c in self.changes},
            "to": {c.desired.field: c.setting.value for c in self.changes},
        }


@dataclass(frozen=True, slots=True)
class RestartStep:
    """Stop one container through the runtime (CRI StopContainer) so that the kubelet starts it again with
    its new values: its resize policy says RestartContainer for a resource that changes. Only that
    container restarts; the pod (sandbox, other containers) is never recreated (seed 004's point).

    It is placed after every parent cgroup has grown and before anything shrinks, so the new container
    starts inside a pod cgroup already large enough, and from then on its old cgroup counts as gone."""

    pod: str
    pod_uid: PodUID
    container: str
    container_id: ContainerID
    cgroup: CgroupName
    resources: tuple[Resource, ...]  # the resources whose change asked for the restart
    kind: Literal["restart"] = "restart"

    @property
    def resource(self) -> Resource:
        return self.resources[0] if self.resources else "memory"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": "restart",
            "pod": self.pod,
            "container": self.container,
            "containerID": self.container_id,
            "resources": list(self.resources),
        }


Step = CgroupStep | ContainerStep | RestartStep


@dataclass(frozen=True, slots=True)
class Blocked:
    """A memory limit held back because usage is above the new limit (retried later; never an error of
    the plan itself). `container` is None for a pod or tier cgroup."""

    pod: str | None
    cgroup: str
    container: str | None
    limit: int
    usage: int
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    warnings: tuple[Problem, ...] = ()
    errors: tuple[Problem, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    refused: str | None = None  # the invariant violation that made build_plan refuse the plan
