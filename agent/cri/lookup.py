"""Which runtime container is "the" container `name` of a pod.

A pod's containers are found by the kubelet's labels (io.kubernetes.pod.uid, io.kubernetes.container.name).
Restarts leave older attempts behind (exited, and kept until garbage-collected), so per name the newest
attempt wins; creation time breaks ties. When the pod status names a container ID (what the kubelet
last reported), that container is preferred as long as the runtime still has it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from agent.core.model import ContainerID
from agent.cri.types import INFRA_CONTAINER_NAME, Container


class ContainerLister(Protocol):
    def list_containers(
        self, pod_uid: str | None = None, sandbox_id: str | None = None
    ) -> list[Container]: ...


def newest_per_name(containers: Iterable[Container]) -> dict[str, Container]:
    """name -> the container with the highest (attempt, created_at); the infra "POD" is skipped."""
    best: dict[str, Container] = {}
    for c in containers:
        if c.name == INFRA_CONTAINER_NAME:
            continue
        current = best.get(c.name)
        if current is None or (c.attempt, c.created_at) > (current.attempt, current.created_at):
            best[c.name] = c
    return best


def pick_containers(
    containers: Iterable[Container], status_ids: Mapping[str, ContainerID] | None = None
) -> dict[str, Container]:
    """newest_per_name, but a name whose status ID the runtime still lists maps to that container."""
    pool = list(containers)
    chosen = newest_per_name(pool)
    by_id = {c.id: c for c in pool}
    for name, cid in (status_ids or {}).items():
        known = by_id.get(cid)
        if known is not None and known.name == name:
            chosen[name] = known
    return chosen


def find_pod_containers(
    client: ContainerLister, pod_uid: str, status_ids: Mapping[str, ContainerID] | None = None
) -> dict[str, Container]:
    """container name -> Container for one pod, as the runtime lists it now."""
    return pick_containers(client.list_containers(pod_uid=pod_uid), status_ids)
