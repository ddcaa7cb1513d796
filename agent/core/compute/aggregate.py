"""Pod requests and limits, as component-helpers' PodRequests/PodLimits compute them.

Regular containers are summed; init containers define a floor: init container i needs its own
resources plus those of the sidecars started before it, and sidecars (restartable init containers)
also run alongside the regular containers. Pod overhead is added to requests, and to a limit only
where that limit is non-zero. Pod-level `spec.resources` replace the container aggregate per resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.core.model import NO_HUGEPAGES, ContainerKind, ContainerView, PodView, Resources


@dataclass(slots=True)
class Amounts:
    """A mutable ResourceList over cpu (millicores), memory and hugepages (bytes); absent = None."""

    cpu_milli: int | None = None
    memory: int | None = None
    hugepages: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, res: Resources) -> Amounts:
        return cls(res.cpu_milli, res.memory, dict(res.hugepages))

    def copy(self) -> Amounts:
        return Amounts(self.cpu_milli, self.memory, dict(self.hugepages))

    def add(self, other: Amounts | Resources) -> None:
        if other.cpu_milli is not None:
            self.cpu_milli = (self.cpu_milli or 0) + other.cpu_milli
        if other.memory is not None:
            self.memory = (self.memory or 0) + other.memory
        for size, amount in other.hugepages.items():
            self.hugepages[size] = self.hugepages.get(size, 0) + amount

    def maximize(self, other: Amounts) -> None:
        if other.cpu_milli is not None and (self.cpu_milli is None or other.cpu_milli > self.cpu_milli):
            self.cpu_milli = other.cpu_milli
        if other.memory is not None and (self.memory is None or other.memory > self.memory):
            self.memory = other.memory
        for size, amount in other.hugepages.items():
            if size not in self.hugepages or amount > self.hugepages[size]:
                self.hugepages[size] = amount

    def freeze(self) -> Resources:
        hugepages = dict(sorted(self.hugepages.items())) if self.hugepages else NO_HUGEPAGES
        return Resources(self.cpu_milli, self.memory, hugepages)


def is_supported_pod_level(res: Resources | None) -> bool:
    """Whether a pod-level ResourceList holds a resource pod-level management supports."""
    return res is not None and (res.cpu_milli is not None or res.memory is not None or bool(res.hugepages))


def pod_level_requests_set(pod: PodView) -> bool:
    return is_supported_pod_level(pod.pod_requests)


def pod_level_limits_set(pod: PodView) -> bool:
    return is_supported_pod_level(pod.pod_limits)


def pod_level_resources_set(pod: PodView) -> bool:
    return pod_level_requests_set(pod) or pod_level_limits_set(pod)


@dataclass(frozen=True, slots=True)
class InitPhase:
    """One init container's footprint while it runs (itself plus the sidecars before it)."""

    container: str
    amounts: Resources


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Container aggregation with the steps kept, so `explain` can show each sum."""

    running: Resources  # regular containers + sidecars
    init_phases: tuple[InitPhase, ...]
    total: Resources  # max(running, every init phase)


def aggregate(pod: PodView, pick_limits: bool) -> Aggregate:
    """AggregateContainerRequests / AggregateContainerLimits over the spec."""
    result = Amounts()
    for c in pod.containers:
        result.add(c.limits if pick_limits else c.requests)
    sidecars = Amounts()
    init_max = Amounts()
    phases: list[InitPhase] = []
    for c in pod.init_containers:
        own = Amounts.of(c.limits if pick_limits else c.requests)
        if c.kind is ContainerKind.SIDECAR:
            result.add(own)
            sidecars.add(own)
            phase = sidecars.copy()
        else:
            phase = own.copy()
            phase.add(sidecars)
        init_max.maximize(phase)
        phases.append(InitPhase(c.name, phase.freeze()))
    running = result.freeze()
    result.maximize(init_max)
    return Aggregate(running, tuple(phases), result.freeze())


def _apply_pod_level(target: Amounts, pod_level: Resources) -> None:
    if pod_level.cpu_milli is not None:
        target.cpu_milli = pod_level.cpu_milli
    if pod_level.memory is not None:
        target.memory = pod_level.memory
    target.hugepages.update(pod_level.hugepages)


def pod_requests(pod: PodView, *, include_overhead: bool = True, containers: Aggregate | None = None) -> Resources:
    """PodRequests: container aggregate, pod-level override, plus overhead. `containers`: the pod's
    aggregate of requests when the caller has it already."""
    reqs = Amounts.of((containers or aggregate(pod, pick_limits=False)).total)
    if pod_level_requests_set(pod) and pod.pod_requests is not None:
        _apply_pod_level(reqs, pod.pod_requests)
    if include_overhead:
        reqs.add(pod.overhead)
    return reqs.freeze()


def pod_limits(pod: PodView, *, include_overhead: bool = True, containers: Aggregate | None = None) -> Resources:
    """PodLimits: container aggregate, pod-level override, overhead only on non-zero limits. `containers`:
    the pod's aggregate of limits when the caller has it already."""
    limits = Amounts.of((containers or aggregate(pod, pick_limits=True)).total)
    if pod_level_resources_set(pod) and pod.pod_limits is not None:
        _apply_pod_level(limits, pod.pod_limits)
    if include_overhead:
        oh = pod.overhead
        if oh.cpu_milli is not None and limits.cpu_milli:
            limits.cpu_milli += oh.cpu_milli
        if oh.memory is not None and limits.memory:
            limits.memory += oh.memory
        for size, amount in oh.hugepages.items():
            if limits.hugepages.get(size):
                limits.hugepages[size] += amount
    return limits.freeze()


def _limit_views(pod: PodView) -> Iterable[Resources]:
    """What the kubelet's ContainerFn sees for limits: each regular container, then for init
    containers the cumulative sidecar limits (sidecar) or own + cumulative sidecars (init)."""
    for c in pod.containers:
        yield c.limits
    sidecars = Amounts()
    for c in pod.init_containers:
        if c.kind is ContainerKind.SIDECAR:
            sidecars.add(c.limits)
            yield sidecars.freeze()
        else:
            combined = Amounts.of(c.limits)
            combined.add(sidecars)
            yield combined.freeze()


def limits_declared(pod: PodView) -> tuple[bool, bool]:
    """(cpu, memory): whether every container declares that limit (a pod-level limit also counts).

    A Burstable pod cgroup gets a CFS quota (or a memory limit) only when this is true.
    """
    cpu = memory = True
    for lim in _limit_views(pod):
        if not lim.cpu_milli:
            cpu = False
        if not lim.memory:
            memory = False
    if pod_level_resources_set(pod) and pod.pod_limits is not None:
        if pod.pod_limits.cpu_milli:
            cpu = True
        if pod.pod_limits.memory:
            memory = True
    return cpu, memory


def all_containers(pod: PodView) -> tuple[ContainerView, ...]:
    return (*pod.init_containers, *pod.containers)
