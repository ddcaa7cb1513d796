"""The vocabulary of the agent: typed, validated, driver-agnostic values.

Everything here is plain data. Pods arrive as `PodView` (built and defaulted at the edge by
`agent.pods`), the pure core turns them into `CgroupValues` and `ContainerValues`, and the drivers
render those into kernel files or CRI messages. Units are in the names: millicores, bytes, µs.
`None` always means "not set / no opinion"; `UNLIMITED` (-1) means "no limit".
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, NewType

from agent.infra.errors import PermanentError
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues

__all__ = ["UNLIMITED", "CgroupName", "CgroupValues"]  # re-exported: the agent's vocabulary includes them

PodUID = NewType("PodUID", str)
ContainerID = NewType("ContainerID", str)
# The name under which a pod's own (pod-level) values or usage are kept beside its containers': the VPA
# source's target for `spec.resources`, the recommender's history of the pod cgroup. No container has it.
POD: Final = ""


# A Kubernetes UID is an RFC 4122 UUID in practice, but static pods carry a hash (32 hex chars)
# and test clusters use other shapes. What matters to the agent is that it is a single, safe path
# component once prefixed with "pod": letters, digits and "-" only, bounded in length.
_UID_RE: Final = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,126}[A-Za-z0-9])?$")
# Container IDs from containerd, CRI-O and docker are 64 lowercase hex characters.
_CONTAINER_ID_RE: Final = re.compile(r"^[0-9a-f]{12,128}$")


class ModelError(PermanentError, ValueError):
    """An input value that the model refuses (bad UID, bad container ID...)."""


def validate_pod_uid(uid: str) -> PodUID:
    """Return `uid` as a PodUID, or raise: it becomes a path component, so nothing else may pass."""
    if not isinstance(uid, str) or not _UID_RE.fullmatch(uid) or "--" in uid:
        raise ModelError(f"invalid pod UID {uid!r}: expected letters, digits and single dashes")
    return PodUID(uid)


def validate_container_id(cid: str) -> ContainerID:
    """Return a runtime-stripped container ID, or raise: it becomes a path component too."""
    if not isinstance(cid, str) or not _CONTAINER_ID_RE.fullmatch(cid):
        raise ModelError(f"invalid container ID {cid!r}: expected 12-128 lowercase hex characters")
    return ContainerID(cid)


class QOSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class ContainerKind(enum.StrEnum):
    REGULAR = "regular"
    INIT = "init"
    SIDECAR = "sidecar"  # an init container with restartPolicy: Always


class ResizePolicy(enum.StrEnum):
    NOT_REQUIRED = "NotRequired"
    RESTART_CONTAINER = "RestartContainer"


class CPUWeightFormula(enum.StrEnum):
    """How cgroup v2 `cpu.weight` is derived from v1 shares (two formulas exist in the wild)."""

    LINEAR = "linear"  # kubelet for pod and QoS cgroups; runc <= 1.3.1
    QUADRATIC = "quadratic"  # runc >= 1.3.2, crun >= 1.23 for containers


@dataclass(frozen=True, slots=True)
class Resources:
    """A ResourceList reduced to what the agent acts on, already rounded as the API server rounds.

    `cpu_milli` and `memory` are None when the resource is absent (which differs from an explicit 0).
    `hugepages` maps a page size in bytes to an amount in bytes. `other` names any further resource
    (extended resources, ephemeral-storage): the agent does not act on them, but resize admission must
    know they are there.
    """

    cpu_milli: int | None = None
    memory: int | None = None
    hugepages: Mapping[int, int] = field(default_factory=lambda: NO_HUGEPAGES)
    other: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Most ResourceLists have neither: one shared empty value instead of a dict and a frozenset per
        # instance (a node's pods, their allocations and computations hold tens of thousands of these).
        if not self.hugepages and self.hugepages is not NO_HUGEPAGES:
            object.__setattr__(self, "hugepages", NO_HUGEPAGES)
        if not self.other and self.other is not NO_OTHER:
            object.__setattr__(self, "other", NO_OTHER)

    def is_empty(self) -> bool:
        return self.cpu_milli is None and self.memory is None and not self.hugepages and not self.other

    def has_cpu_or_memory(self) -> bool:
        return self.cpu_milli is not None or self.memory is not None


NO_HUGEPAGES: Final[Mapping[int, int]] = MappingProxyType({})
NO_OTHER: Final[frozenset[str]] = frozenset()
EMPTY: Final = Resources()


@dataclass(frozen=True, slots=True)
class ContainerView:
    """One container of the spec (an init container, a sidecar or a regular one) and its resources."""

    name: str
    kind: ContainerKind
    requests: Resources = EMPTY
    limits: Resources = EMPTY
    resize_policy: Mapping[str, ResizePolicy] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ContainerStatusView:
    """What the pod status says of one container: the link from a spec container to its runtime."""

    name: str
    container_id: ContainerID | None = None
    runtime: str | None = None  # "containerd", "cri-o", "docker" (the scheme of the status containerID)
    running: bool = False
    restart_count: int = 0
    # status.containerStatuses[].allocatedResources: the requests the kubelet admitted (None: not reported)
    allocated: Resources | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    """One pod, validated and with the API server's defaulting applied."""

    uid: PodUID
    namespace: str
    name: str
    containers: tuple[ContainerView, ...]
    init_containers: tuple[ContainerView, ...] = ()
    overhead: Resources = EMPTY
    pod_requests: Resources | None = None  # spec.resources.requests (pod-level), None when absent
    pod_limits: Resources | None = None  # spec.resources.limits (pod-level), None when absent
    node_name: str | None = None
    phase: str = "Running"
    restart_policy: str = "Always"
    priority: int = 0
    generation: int = 0
    deleting: bool = False  # metadata.deletionTimestamp is set: the kubelet is stopping it
    statuses: tuple[ContainerStatusView, ...] = ()
    init_statuses: tuple[ContainerStatusView, ...] = ()
    pod_level_source: str | None = None  # "spec" or the source (agent.pods.sources) that set pod-level values
    status_qos: QOSClass | None = None  # status.qosClass: the kubelet trusts it over a recomputation
    # Which source (agent.pods.sources) decided each resource field that is not the spec's own, e.g.
    # {"containers/app/limits/cpu": "resize-annotation"}; empty when the spec decided everything.
    provenance: Mapping[str, str] = field(default_factory=dict)
    # The controller that owns the pod (metadata.ownerReferences with controller: true), as (kind, name),
    # and the pod's labels: what a VPA's targetRef or a workload is matched against.
    owner: tuple[str, str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def status_of(self, container: str) -> ContainerStatusView | None:
        for st in (*self.statuses, *self.init_statuses):
            if st.name == container:
                return st
        return None


@dataclass(frozen=True, slots=True)
class HugepageLimit:
    """A container's hugetlb limit for one page size, as CRI carries it."""

    page_size: int  # bytes
    limit: int  # bytes


@dataclass(frozen=True, slots=True)
class ContainerValues:
    """The LinuxContainerResources the kubelet would send for one container."""

    cpu_shares: int
    cpu_quota: int  # µs; UNLIMITED when the container has no CPU limit
    cpu_period: int  # µs
    memory_limit: int  # bytes; UNLIMITED when the container has no memory limit
    hugepage_limits: tuple[HugepageLimit, ...] = ()


class TierKind(enum.StrEnum):
    NODE = "kubepods"  # the node-allocatable root, also the Guaranteed tier
    BURSTABLE = "burstable"
    BEST_EFFORT = "besteffort"


@dataclass(frozen=True, slots=True)
class Problem:
    """A warning or error about one pod (or the node when `pod` is None), for the user."""

    pod: str | None
    message: str
