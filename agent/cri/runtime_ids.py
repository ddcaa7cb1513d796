"""Link each pod's containers to the runtime's containers when a CRI endpoint is given.

Manifests often carry no status (a bare node, a hand-written file) and a status can lag behind a
restart; the runtime's own list, by the kubelet's labels, is the source of truth. An ID the pod status
names is kept while the runtime still has that container.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from agent.core.model import ContainerID, ContainerKind, ContainerStatusView, PodView
from agent.cri.cgroup_paths import runtime_kind
from agent.cri.lookup import ContainerLister, pick_containers
from agent.cri.types import Container, ContainerState


def with_runtime_ids(
    pods: tuple[PodView, ...], client: ContainerLister, runtime_name: str
) -> tuple[PodView, ...]:
    """The pods with their running containers' statuses taken from the runtime (one list call)."""
    by_pod: dict[str, list[Container]] = defaultdict(list)
    for c in client.list_containers():
        if c.pod_uid is not None:
            by_pod[c.pod_uid].append(c)
    kind = runtime_kind(runtime_name)
    out: list[PodView] = []
    for pod in pods:
        containers = by_pod.get(pod.uid)
        if not containers:
            out.append(pod)
            continue
        known: dict[str, ContainerID] = {
            st.name: st.container_id
            for st in (*pod.statuses, *pod.init_statuses)
            if st.container_id is not None
        }
        chosen = pick_containers(containers, known)
        regular = [_status(chosen, kind, c.name, pod.status_of(c.name)) for c in pod.containers]
        sidecars = [
            _status(chosen, kind, c.name, pod.status_of(c.name))
            for c in pod.init_containers
            if c.kind is ContainerKind.SIDECAR
        ]
        out.append(
            replace(
                pod,
                statuses=tuple(s for s in regular if s is not None),
                init_statuses=tuple(s for s in sidecars if s is not None),
            )
        )
    return tuple(out)


def _status(
    chosen: dict[str, Container], kind: str, name: str, old: ContainerStatusView | None
) -> ContainerStatusView | None:
    c = chosen.get(name)
    if c is None:
        return old
    restarts = old.restart_count if old is not None else c.attempt
    return ContainerStatusView(name, c.id, kind, c.state is ContainerState.RUNNING, restarts)
