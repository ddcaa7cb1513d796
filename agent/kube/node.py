"""This node as the API describes it: what the kubepods tree is sized with, and the kubelet's version.

Why not `status.allocatable`: the kubelet sizes kubepods with capacity - kube-reserved - system-reserved,
while `status.allocatable` also subtracts the hard eviction threshold (research/kubelet-observed.md).
So, in order of preference: the `allocatable` setting; capacity minus the `kubeReserved` and
`systemReserved` settings (the kubelet's own names); else `status.allocatable` plus the memory eviction
threshold (`evictionHard: {memory.available: ...}`, the kubelet's default 100Mi). Pure, except `read_node`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.config.settings import Settings
from agent.core.model import Resources
from agent.infra.apiserver import APIServer, path
from agent.kube.errors import wrap
from agent.pods import quantity
from agent.pods.parse import resource_list


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    allocatable: Resources | None
    allocatable_source: str  # how it was derived, for the start-up log line
    kubelet_version: str | None
    kubepods: Resources | None = None  # capacity, when the kubelet sizes kubepods with it (no pods enforcement)


def _minus(a: int | None, *bs: int | None) -> int | None:
    if a is None:
        return None
    return a - sum(b or 0 for b in bs)


def eviction_memory(text: str, capacity: int | None) -> int:
    """`100Mi` or `5%` (of capacity) in bytes."""
    if text.endswith("%"):
        return (capacity or 0) * int(text[:-1]) // 100
    return quantity.to_int(text, "evictionHard memory.available")


def derive_allocatable(node: Mapping[str, Any], settings: Settings) -> tuple[Resources | None, str]:
    if settings.allocatable is not None:
        return settings.allocatable, "the allocatable setting"
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    capacity = resource_list(status.get("capacity"), "status.capacity")
    if settings.kube_reserved is not None or settings.system_reserved is not None:
        kr, sr = settings.kube_reserved or Resources(), settings.system_reserved or Resources()
        alloc = Resources(
            cpu_milli=_minus(capacity.cpu_milli, kr.cpu_milli, sr.cpu_milli),
            memory=_minus(capacity.memory, kr.memory, sr.memory),
            hugepages={
                s: v - kr.hugepages.get(s, 0) - sr.hugepages.get(s, 0) for s, v in capacity.hugepages.items()
            },
        )
        return alloc, "status.capacity - kubeReserved - systemReserved"
    raw = status.get("allocatable")
    if raw is None:
        return None, "the Node has no status.allocatable: the kubepods root is left as it is"
    reported = resource_list(raw, "status.allocatable")
    threshold = eviction_memory(settings.eviction_hard_memory, capacity.memory)
    alloc = Resources(
        cpu_milli=reported.cpu_milli,
        memory=reported.memory + threshold if reported.memory is not None else None,
        hugepages=dict(reported.hugepages),
    )
    return alloc, f"status.allocatable + evictionHard memory.available {settings.eviction_hard_memory}"


def kubepods_size(node: Mapping[str, Any], settings: Settings) -> Resources | None:
    """The Node's capacity when the kubelet does not enforce node allocatable on pods (it then sizes kubepods
    with its capacity, createNodeAllocatableCgroups); None when it does (kubepods gets the allocatable)."""
    if "pods" in settings.enforce_node_allocatable:
        return None
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    return resource_list(status.get("capacity"), "status.capacity")


def node_info(node: Mapping[str, Any], settings: Settings) -> NodeInfo:
    meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    assert isinstance(meta, Mapping) and isinstance(status, Mapping)
    info = status.get("nodeInfo") if isinstance(status.get("nodeInfo"), Mapping) else {}
    assert isinstance(info, Mapping)
    version = settings.kubelet_version or info.get("kubeletVersion")
    alloc, source = derive_allocatable(node, settings)
    return NodeInfo(
        str(meta.get("name") or ""),
        alloc,
        source,
        version if isinstance(version, str) else None,
        kubepods_size(node, settings),
    )


def read_node(api: APIServer, name: str) -> Mapping[str, Any]:
    try:
        data = api.get(path("v1", "nodes", name=name), timeout=(10, 30))
    except Exception as err:
        raise wrap(f"get node {name}", err) from err
    if not isinstance(data, Mapping):
        raise wrap(f"get node {name}", ValueError("not a JSON object"))
    return data
