"""Moving between PodViews and PodAllocations, and rebuilding an allocation from the kernel (pure).

The agent computes every cgroup value from pods *at their allocated values* (`with_allocation`), never
from the spec directly: a resize that was not admitted must not reach the kernel, and on restart the
allocated state — not whatever the spec says now — is what the node was actuating.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agent.core.compute.config import ComputeConfig
from agent.core.compute.container import compute_container
from agent.core.compute.cpu import quota_to_milli_cpu, shares_to_milli_cpu
from agent.core.compute.qos import compute_qos
from agent.core.model import UNLIMITED, ContainerValues, ContainerView, PodView, Resources
from agent.resize.types import ContainerAllocation, PodAllocation
from cgroupfs.convert import page_round


def allocation_of(pod: PodView) -> PodAllocation:
    """The resizable part of a pod as it stands (the desired state when `pod` comes from the source)."""

    def one(c: ContainerView) -> ContainerAllocation:
        return ContainerAllocation(c.name, c.requests, c.limits)

    return PodAllocation(
        tuple(one(c) for c in pod.containers),
        tuple(one(c) for c in pod.init_containers),
        pod.pod_requests,
        pod.pod_limits,
    )


def with_allocation(pod: PodView, alloc: PodAllocation) -> PodView:
    """`pod` with its resources replaced by `alloc` (containers matched by name; others unchanged).
    What `alloc` leaves as it is stays the very same object, and so does `pod` itself when nothing
    changes (most pods: allocated as they ask); the engine keeps each pod's computation from this view,
    so a copy would be a second view of every pod held for the daemon's life."""

    def one(c: ContainerView) -> ContainerView:
        a = alloc.container(c.name)
        if a is None or (a.requests == c.requests and a.limits == c.limits):
            return c
        return replace(c, requests=a.requests, limits=a.limits)

    containers = tuple(one(c) for c in pod.containers)
    init_containers = tuple(one(c) for c in pod.init_containers)
    if (
        all(a is b for a, b in zip(containers, pod.containers, strict=True))
        and all(a is b for a, b in zip(init_containers, pod.init_containers, strict=True))
        and alloc.pod_requests == pod.pod_requests
        and alloc.pod_limits == pod.pod_limits
    ):
        return pod
    return replace(
        pod,
        containers=containers,
        init_containers=init_containers,
        pod_requests=alloc.pod_requests,
        pod_limits=alloc.pod_limits,
    )


def rebuild_container(
    pod: PodView, c: ContainerView, observed: ContainerValues, cfg: ComputeConfig
) -> ContainerAllocation:
    """What a container must have been allocated to show `observed` in its cgroup (checkpoint lost).

    Each field keeps the spec's value when that value produces exactly what the kernel shows, and is
    otherwise read back with the kubelet's reverse conversions. The memory request is not in the kernel:
    it follows the rebuilt limit where the spec had them equal (keeping the QoS class), else the spec's.
    """
    want = compute_container(pod, c, cfg).values
    req, lim = c.requests, c.limits
    cpu_req = req.cpu_milli
    if observed.cpu_shares != want.cpu_shares:
        cpu_req = shares_to_milli_cpu(observed.cpu_shares) or None
    cpu_lim = lim.cpu_milli
    if observed.cpu_quota != want.cpu_quota:
        cpu_lim = (
            None
            if observed.cpu_quota == UNLIMITED
            else quota_to_milli_cpu(observed.cpu_quota, observed.cpu_period)
        )
    mem_lim = lim.memory
    if _mem(observed.memory_limit) != _mem(want.memory_limit):
        mem_lim = None if observed.memory_limit == UNLIMITED else observed.memory_limit
    mem_req = req.memory
    if req.memory is not None and req.memory == lim.memory:
        mem_req = mem_lim
    if req.cpu_milli is not None and req.cpu_milli == lim.cpu_milli and cpu_lim is not None:
        cpu_req = cpu_lim  # a Guaranteed container's request is its limit; shares only round it
    return ContainerAllocation(
        c.name,
        replace(req, cpu_milli=cpu_req, memory=mem_req),
        replace(lim, cpu_milli=cpu_lim, memory=mem_lim),
    )


def _mem(value: int) -> int:
    return value if value == UNLIMITED else page_round(value)


def rebuild_allocation(
    pod: PodView, observed: Mapping[str, ContainerValues], cfg: ComputeConfig
) -> PodAllocation:
    """A pod's allocation as the kernel shows it; containers without observed values keep the spec's.
    When what the kernel shows would put the pod in another QoS class (a container the runtime never
    limited), the spec's values are taken instead: a pod never changes class."""
    base = allocation_of(pod)
    rebuilt = replace(
        base,
        containers=tuple(
            rebuild_container(pod, c, observed[c.name], cfg)
            if c.name in observed
            else ContainerAllocation(c.name, c.requests, c.limits)
            for c in pod.containers
        ),
    )
    plain = replace(pod, status_qos=None)
    if compute_qos(with_allocation(plain, rebuilt)).qos is not compute_qos(plain).qos:
        return base
    return rebuilt


# ----- JSON (the checkpoint's form)


def resources_to_json(r: Resources | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "cpuMilli": r.cpu_milli,
        "memory": r.memory,
        "hugepages": {str(k): v for k, v in sorted(r.hugepages.items())},
        "other": sorted(r.other),
    }


def resources_from_json(raw: object) -> Resources | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError("resources must be an object")
    cpu, mem = raw.get("cpuMilli"), raw.get("memory")
    huge, other = raw.get("hugepages", {}), raw.get("other", [])
    if not (cpu is None or _is_int(cpu)) or not (mem is None or _is_int(mem)):
        raise ValueError("cpuMilli and memory must be integers or null")
    if not isinstance(huge, Mapping) or not all(_is_int(v) for v in huge.values()):
        raise ValueError("hugepages must map page sizes to integers")
    if not isinstance(other, list) or not all(isinstance(o, str) for o in other):
        raise ValueError("other must be a list of names")
    return Resources(cpu, mem, {int(k): v for k, v in huge.items()}, frozenset(other))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def allocation_to_json(a: PodAllocation) -> dict[str, Any]:
    def ctrs(cs: tuple[ContainerAllocation, ...]) -> list[dict[str, Any]]:
        return [
            {"name": c.name, "requests": resources_to_json(c.requests), "limits": resources_to_json(c.limits)}
            for c in cs
        ]

    return {
        "containers": ctrs(a.containers),
        "initContainers": ctrs(a.init_containers),
        "podRequests": resources_to_json(a.pod_requests),
        "podLimits": resources_to_json(a.pod_limits),
    }


def allocation_from_json(raw: object) -> PodAllocation:
    if not isinstance(raw, Mapping):
        raise ValueError("an allocation must be an object")

    def ctrs(items: object) -> tuple[ContainerAllocation, ...]:
        if not isinstance(items, list):
            raise ValueError("containers must be a list")
        out = []
        for c in items:
            if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
                raise ValueError("a container needs a name")
            out.append(
                ContainerAllocation(
                    c["name"],
                    resources_from_json(c.get("requests")) or Resources(),
                    resources_from_json(c.get("limits")) or Resources(),
                )
            )
        return tuple(out)

    return PodAllocation(
        ctrs(raw.get("containers")),
        ctrs(raw.get("initContainers", [])),
        resources_from_json(raw.get("podRequests")),
        resources_from_json(raw.get("podLimits")),
    )
