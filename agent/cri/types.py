"""What the agent knows of the runtime's objects: plain frozen data, never protobuf messages.

`agent.cri.convert` converts at the gRPC edge; everything else in the agent imports these.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from agent.core.model import ContainerID, ContainerValues, PodUID

# The kubelet's labels on every container it creates (k8s.io/kubelet/pkg/types/labels.go).
LABEL_POD_UID: Final = "io.kubernetes.pod.uid"
LABEL_POD_NAME: Final = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE: Final = "io.kubernetes.pod.namespace"
LABEL_CONTAINER_NAME: Final = "io.kubernetes.container.name"
INFRA_CONTAINER_NAME: Final = "POD"  # the sandbox ("pause") container, as dockershim listed it


class ContainerState(enum.StrEnum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    version: str  # the CRI API version the runtime speaks to the kubelet ("0.1.0")
    runtime_name: str  # "containerd", "cri-o", ...
    runtime_version: str
    runtime_api_version: str  # "v1"


@dataclass(frozen=True, slots=True)
class Sandbox:
    id: str
    pod_uid: PodUID
    name: str
    namespace: str
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 0
    created_at: int = 0  # ns since the epoch


@dataclass(frozen=True, slots=True)
class Container:
    id: ContainerID
    sandbox_id: str
    pod_uid: PodUID | None  # None when the container lacks the kubelet's labels
    name: str
    state: ContainerState
    attempt: int
    labels: Mapping[str, str] = field(default_factory=dict)
    created_at: int = 0  # ns since the epoch


@dataclass(frozen=True, slots=True)
class ContainerStatusInfo:
    """ContainerStatus, reduced. `resources` echoes the runtime's stored spec (containerd), NOT the kernel.

    `resources` is None when the runtime does not report resources. Unset fields come back as 0 on
    the wire; they are read as: quota 0 -> UNLIMITED, memory 0 -> UNLIMITED, period and shares 0 ->
    0 ("not set"). `cgroups_path` is the OCI spec's `linux.cgroupsPath` from the verbose info
    (containerd, CRI-O), or None.
    """

    id: ContainerID
    name: str
    state: ContainerState
    resources: ContainerValues | None
    cgroups_path: str | None = None
    attempt: int = 0
    pid: int | None = None  # from the verbose info, when present


_UNITS: Final = ("B", "KB", "MB", "GB", "TB", "PB")
_PAGE_SIZE_RE: Final = re.compile(r"^(\d+)(B|KB|MB|GB|TB|PB)$")


def format_page_size(size: int) -> str:
    """The CRI's hugepage size string, as the kubelet makes it (HugePageUnitSizeFromByteSize).

    2097152 -> "2MB", 1073741824 -> "1GB" (base 1024, largest unit that divides evenly).
    """
    if size <= 0:
        raise ValueError(f"invalid hugepage size {size}")
    idx = 0
    while size % 1024 == 0 and idx < len(_UNITS) - 1:
        size //= 1024
        idx += 1
    if size > 1024 and idx < len(_UNITS) - 1:
        raise ValueError(f"hugepage size {size}{_UNITS[idx]} is not a whole number of a larger unit")
    return f"{size}{_UNITS[idx]}"


def parse_page_size(text: str) -> int:
    """The inverse of format_page_size: "2MB" -> 2097152."""
    match = _PAGE_SIZE_RE.fullmatch(text)
    if not match:
        raise ValueError(f"invalid hugepage size {text!r}: expected <n>B|KB|MB|GB|TB|PB")
    return int(match.group(1)) << (10 * _UNITS.index(match.group(2)))
