"""Resize admission (pure): Accepted, Deferred or Infeasible, for a whole pod at once (atomic).

The fit rule is KEP-1287's: the node's allocatable must hold the sum of every *other* pod's allocated
requests plus this pod's new requests, overhead included (PodRequests adds it). Infeasible is for what
no amount of waiting fixes: a QoS class change, a non-integral CPU for a Guaranteed pod under the static
CPU manager (seed 000's rule; newer kubelets refuse any CPU change there), resizing a non-sidecar init
container, changing anything but CPU and memory, removing a request or limit, a changed container set,
or asking for more than the node's allocatable alone. Everything else that does not fit is Deferred.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from agent.core.compute.aggregate import pod_requests
from agent.core.compute.qos import compute_qos
from agent.core.model import ContainerKind, PodView, QOSClass, Resources
from agent.resize.allocation import with_allocation
from agent.resize.types import ContainerAllocation, PodAllocation


class Verdict(enum.StrEnum):
    ACCEPTED = "Accepted"
    DEFERRED = "Deferred"
    INFEASIBLE = "Infeasible"


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What admission measures against. `allocatable` None means unknown: every fit check passes."""

    allocatable: Resources | None
    cpu_manager_policy: str = "none"


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    reason: str = ""
    message: str = ""
    on_next_update: bool = False  # Deferred until something else moves (not a capacity wait): look each pass


ACCEPTED = Admission(Verdict.ACCEPTED)

Admit = Callable[
    [PodView, PodAllocation, PodAllocation, Iterable[PodView], NodeCapacity, tuple[int, int] | None], Admission
]
"""How a queued resize is decided: `admit` (the agent admits), or `admit_after_kubelet` (it follows the kubelet)."""


def _infeasible(reason: str, message: str) -> Admission:
    return Admission(Verdict.INFEASIBLE, reason, message)


def _pairs(
    old: Iterable[ContainerAllocation], new: Iterable[ContainerAllocation]
) -> list[tuple[ContainerAllocation, ContainerAllocation]]:
    by_name = {c.name: c for c in old}
    return [(by_name[c.name], c) for c in new if c.name in by_name]


def _removed(old: Resources | None, new: Resources | None) -> list[str]:
    old = old or Resources()
    new = new or Resources()
    out = []
    if old.cpu_milli is not None and new.cpu_milli is None:
        out.append("cpu")
    if old.memory is not None and new.memory is None:
        out.append("memory")
    return out


def _non_cpu_memory_changed(old: Resources | None, new: Resources | None) -> bool:
    old = old or Resources()
    new = new or Resources()
    return dict(old.hugepages) != dict(new.hugepages) or old.other != new.other


def _names(a: PodAllocation) -> tuple[list[str], list[str]]:
    return [c.name for c in a.containers], [c.name for c in a.init_containers]


def check_allowed(
    pod: PodView, allocated: PodAllocation, desired: PodAllocation, node: NodeCapacity
) -> Admission:
    """The rules that make a resize Infeasible whatever the node's load (pure)."""
    if _names(allocated) != _names(desired):
        return _infeasible("ContainersChanged", "the pod's containers changed; that is not a resize")
    kinds = {c.name: c.kind for c in pod.init_containers}
    for old, new in _pairs(allocated.init_containers, desired.init_containers):
        if kinds.get(new.name) is ContainerKind.INIT and (old.requests, old.limits) != (
            new.requests,
            new.limits,
        ):
            return _infeasible(
                "InitContainerResize", f"init container {new.name!r} is not a sidecar and cannot be resized"
            )
    pairs = _pairs(
        (*allocated.containers, *allocated.init_containers), (*desired.containers, *desired.init_containers)
    )
    for old, new in pairs:
        for what, o, n in (("requests", old.requests, new.requests), ("limits", old.limits, new.limits)):
            if _non_cpu_memory_changed(o, n):
                return _infeasible(
                    "UnsupportedResource",
                    f"container {new.name!r}: only cpu and memory can be resized in place ({what} changed otherwise)",
                )
            gone = _removed(o, n)
            if gone:
                return _infeasible(
                    "ResourceRemoved",
                    f"container {new.name!r}: {what} for {', '.join(gone)} cannot be removed once set",
                )
    pod_level: tuple[tuple[str, Resources | None, Resources | None], ...] = (
        ("requests", allocated.pod_requests, desired.pod_requests),
        ("limits", allocated.pod_limits, desired.pod_limits),
    )
    for what, po, pn in pod_level:
        if _non_cpu_memory_changed(po, pn):
            return _infeasible(
                "UnsupportedResource", f"pod-level {what}: only cpu and memory can be resized in place"
            )
    before = compute_qos(with_allocation(replace(pod, status_qos=None), allocated)).qos
    after = compute_qos(with_allocation(replace(pod, status_qos=None), desired)).qos
    if before is not after:
        return _infeasible(
            "QOSClassChange",
            f"the resize would change the pod's QoS class from {before.value} to {after.value}",
        )
    if node.cpu_manager_policy == "static" and after is QOSClass.GUARANTEED:
        for old, new in pairs:
            cpu = new.requests.cpu_milli
            if cpu is not None and cpu != old.requests.cpu_milli and cpu % 1000:
                return _infeasible(
                    "NonIntegralCPU",
                    f"container {new.name!r}: the static CPU manager allows only whole CPUs for a Guaranteed "
                    f"pod, not {cpu}m",
                )
    return ACCEPTED


def _fmt(resource: str, value: int) -> str:
    return f"{value}m" if resource == "cpu" else str(value)


def admit(
    pod: PodView,
    allocated: PodAllocation,
    desired: PodAllocation,
    others: Iterable[PodView],
    node: NodeCapacity,
    others_used: tuple[int, int] | None = None,
) -> Admission:
    """Decide a resize of `pod` (observed view, for overhead and kinds) from `allocated` to `desired`.
    `others` are the node's other pods at their allocated values; `others_used`, when given, is their summed
    (CPU milli, memory) requests instead (a caller keeping running totals passes no pods)."""
    allowed = check_allowed(pod, allocated, desired, node)
    if allowed.verdict is not Verdict.ACCEPTED:
        return allowed
    if node.allocatable is None:
        return ACCEPTED
    wanted = pod_requests(with_allocation(pod, desired))
    used_cpu, used_mem = others_used or (0, 0)
    for other in () if others_used is not None else others:
        r = pod_requests(other)
        used_cpu += r.cpu_milli or 0
        used_mem += r.memory or 0
    for resource, want, used, total in (
        ("cpu", wanted.cpu_milli or 0, used_cpu, node.allocatable.cpu_milli),
        ("memory", wanted.memory or 0, used_mem, node.allocatable.memory),
    ):
        if total is None:
            continue
        if want > total:
            return _infeasible(
                "InsufficientNodeAllocatable",
                f"Node didn't have enough capacity: {resource}, requested: {_fmt(resource, want)}, "
                f"capacity: {_fmt(resource, total)}",
            )
        if used + want > total:
            return Admission(
                Verdict.DEFERRED,
                "InsufficientCapacity",
                f"Node didn't have enough resource: {resource}, requested: {_fmt(resource, want)}, "
                f"used by other pods: {_fmt(resource, used)}, allocatable: {_fmt(resource, total)}",
            )
    return ACCEPTED


def admit_after_kubelet(
    pod: PodView,
    allocated: PodAllocation,
    desired: PodAllocation,
    others: Iterable[PodView],
    node: NodeCapacity,
    others_used: tuple[int, int] | None = None,
) -> Admission:
    """Admission on a node whose kubelet resizes containers: the kubelet admits the containers' new
    values and the agent follows its allocation, so the tiers it sizes agree with the kubelet's. A
    container whose `allocatedResources` is reported and differs from the new requests is not admitted
    yet (the kubelet deferred it or has not looked): Deferred, looked at again on the pod's next update.
    Not reported (an older kubelet, a bare status): the spec is followed, as the API server accepted it.
    A change of pod-level values, which the agent's own source can make, still goes through `admit`."""
    for want in (*desired.containers, *desired.init_containers):
        st = pod.status_of(want.name)
        if st is None or st.allocated is None:
            continue
        got, new = st.allocated, want.requests
        if (got.cpu_milli, got.memory) != (new.cpu_milli, new.memory):
            return Admission(
                Verdict.DEFERRED,
                "WaitingForKubelet",
                f"container {want.name!r}: the kubelet has allocated {_requests(got)}, not {_requests(new)} yet",
                on_next_update=True,
            )
    if (allocated.pod_requests, allocated.pod_limits) != (desired.pod_requests, desired.pod_limits):
        return admit(pod, allocated, desired, others, node, others_used)
    return ACCEPTED


def _requests(r: Resources) -> str:
    parts = [f"cpu={r.cpu_milli}m" if r.cpu_milli is not None else "", f"memory={r.memory}" if r.memory is not None else ""]
    return ", ".join(p for p in parts if p) or "no requests"
