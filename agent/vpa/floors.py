"""Where a reaction (agent.vpa.react) meets the VPA: the floors it sets, how high they may go, and the VPA
with its recommendation raised to them (pure).

The floor is laid under the recommendation rather than written around it, so that everything VPA's rules
do with a target still happens to a raised one: capping, proportional limits, the QoS guard, the memory
held at usage. A container with no recommendation yet gets one from its own requests, raised.

How high (`caps`): a request never goes above the policy's maxAllowed, above what the node has left to give
(its allocatable less every pod's requests: the API server of a v1.33+ cluster refuses more, and a bare
node could not run it), nor, under RequestsOnly, above the container's limit (VPA never moves that limit,
so a raised request could not help); a resource the policy does not control is never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from agent.core.compute.aggregate import pod_requests
from agent.core.model import EMPTY, ContainerView, PodView, Resources
from agent.vpa.model import VPA, ContainerPolicy, ControlledValues, Recommendation


@dataclass(frozen=True, slots=True)
class Floor:
    """The least a container's requests may be after a reaction (millicores, bytes); None: no floor."""

    cpu_milli: int | None = None
    memory: int | None = None
    oom_at: float | None = None  # the last OOM kill counted (a kill told twice, or again after a restart, counts once)
    cpu_limit_before: int | None = None  # the CPU limit before the raise: the decay's measure (agent.vpa.react)

    @property
    def empty(self) -> bool:
        return self.cpu_milli is None and self.memory is None


def _at_least(r: Resources, floor: Floor) -> Resources:
    cpu, memory = r.cpu_milli, r.memory
    if floor.cpu_milli is not None and (cpu is None or cpu < floor.cpu_milli):
        cpu = floor.cpu_milli
    if floor.memory is not None and (memory is None or memory < floor.memory):
        memory = floor.memory
    return replace(r, cpu_milli=cpu, memory=memory)


def with_floors(vpa: VPA, containers: Sequence[ContainerView], floors: Mapping[str, Floor]) -> VPA:
    """The VPA with each floored container's target (and upper bound) raised to its floor."""
    if not floors:
        return vpa
    recs = {r.container: r for r in vpa.recommendations}
    for c in containers:
        floor = floors.get(c.name)
        if floor is None or floor.empty:
            continue
        rec = recs.get(c.name) or Recommendation(c.name, target=c.requests, lower=EMPTY, upper=c.requests)
        target = _at_least(rec.target, floor)
        recs[c.name] = replace(rec, target=target, upper=_at_least(rec.upper, Floor(target.cpu_milli, target.memory)))
    known = [r.container for r in vpa.recommendations]
    order = known + [name for name in recs if name not in known]
    return replace(vpa, recommendations=tuple(recs[name] for name in order))


def _least(*values: int | None) -> int | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def caps(c: ContainerView, policy: ContainerPolicy | None, free: Resources | None) -> Resources:
    """The highest requests a reaction may give `c` (None: no bound for that resource)."""
    if policy is not None and policy.off:
        return c.requests
    controlled = policy.controlled if policy is not None else frozenset({"cpu", "memory"})
    out = []
    for res in ("cpu", "memory"):
        request = c.requests.cpu_milli if res == "cpu" else c.requests.memory
        if res not in controlled:
            out.append(request)
            continue
        most = None
        if policy is not None:
            most = policy.max_allowed.cpu_milli if res == "cpu" else policy.max_allowed.memory
            if policy.values is ControlledValues.REQUESTS_ONLY:
                most = _least(most, c.limits.cpu_milli if res == "cpu" else c.limits.memory)
        left = None if free is None else (free.cpu_milli if res == "cpu" else free.memory)
        if left is not None:
            most = _least(most, (request or 0) + max(left, 0))
        out.append(most)
    return Resources(out[0], out[1])


def free_allocatable(allocatable: Resources, pods: Iterable[PodView]) -> Resources:
    """What the node has left for requests: its allocatable less the requests of every pod still running
    (the scheduler's and the API server's sum: PodRequests with overhead)."""
    cpu, memory = allocatable.cpu_milli, allocatable.memory
    for pod in pods:
        if pod.phase in ("Succeeded", "Failed"):
            continue
        r = pod_requests(pod)
        if cpu is not None:
            cpu -= r.cpu_milli or 0
        if memory is not None:
            memory -= r.memory or 0
    return Resources(cpu, memory)
