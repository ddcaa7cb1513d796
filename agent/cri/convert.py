"""Protobuf <-> the agent's runtime types, at the gRPC edge: no other module reads or builds a CRI message.

A runtime's answer is input like any other: ids and pod UIDs are validated here, and a malformed answer
becomes InvalidResponse. Values follow containerd's merge semantics for `UpdateContainerResources`
(anchors §1.11; tests/e2e checks each point below against containerd 1.6.20 + runc 1.1.5 on cgroup v1):
a zero field means "leave unchanged". Hence:
* an unlimited CPU quota is sent as -1 (0 would keep the old quota);
* an unlimited memory limit is sent as -1, which runc applies as "no limit" (0 would keep the old
  limit, so a limit can never be removed by sending 0);
* `cpu_period` / `cpu_shares` of 0 in `ContainerValues` leave those values unchanged;
* hugepage limits are appended to the stored spec, never replaced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from agent.core.model import (
    UNLIMITED,
    ContainerID,
    ContainerValues,
    HugepageLimit,
    ModelError,
    PodUID,
    validate_container_id,
    validate_pod_uid,
)
from agent.cri.errors import InvalidResponse
from agent.cri.types import (
    LABEL_CONTAINER_NAME,
    LABEL_POD_UID,
    Container,
    ContainerState,
    ContainerStatusInfo,
    RuntimeVersion,
    Sandbox,
    format_page_size,
    parse_page_size,
)
from agent.cri.v1 import api_pb2 as pb

_STATES: Final = {
    pb.CONTAINER_CREATED: ContainerState.CREATED,
    pb.CONTAINER_RUNNING: ContainerState.RUNNING,
    pb.CONTAINER_EXITED: ContainerState.EXITED,
    pb.CONTAINER_UNKNOWN: ContainerState.UNKNOWN,
}


def linux_from_values(values: ContainerValues) -> pb.LinuxContainerResources:
    """LinuxContainerResources for an update. UNLIMITED (-1) is sent as -1: 0 would mean "unchanged"."""
    return pb.LinuxContainerResources(
        cpu_period=values.cpu_period,
        cpu_quota=values.cpu_quota,
        cpu_shares=values.cpu_shares,
        memory_limit_in_bytes=values.memory_limit,
        hugepage_limits=[
            pb.HugepageLimit(page_size=format_page_size(h.page_size), limit=h.limit)
            for h in values.hugepage_limits
        ],
    )


def values_from_linux(res: pb.LinuxContainerResources) -> ContainerValues:
    """ContainerValues from a status: a quota or memory limit of 0 (unset) or below reads as UNLIMITED."""
    return ContainerValues(
        cpu_shares=res.cpu_shares,
        cpu_quota=res.cpu_quota if res.cpu_quota > 0 else UNLIMITED,
        cpu_period=res.cpu_period,
        memory_limit=res.memory_limit_in_bytes if res.memory_limit_in_bytes > 0 else UNLIMITED,
        hugepage_limits=tuple(
            HugepageLimit(page_size=parse_page_size(h.page_size), limit=h.limit) for h in res.hugepage_limits
        ),
    )


def runtime_version(resp: pb.VersionResponse) -> RuntimeVersion:
    return RuntimeVersion(
        version=resp.version,
        runtime_name=resp.runtime_name,
        runtime_version=resp.runtime_version,
        runtime_api_version=resp.runtime_api_version,
    )


def sandbox(item: pb.PodSandbox) -> Sandbox:
    return Sandbox(
        id=item.id,
        pod_uid=_pod_uid("ListPodSandbox", item.metadata.uid),
        name=item.metadata.name,
        namespace=item.metadata.namespace,
        ready=item.state == pb.SANDBOX_READY,
        labels=dict(item.labels),
        attempt=item.metadata.attempt,
        created_at=item.created_at,
    )


def container(item: pb.Container) -> Container:
    labels = dict(item.labels)
    uid = labels.get(LABEL_POD_UID)
    return Container(
        id=_container_id("ListContainers", item.id),
        sandbox_id=item.pod_sandbox_id,
        pod_uid=_pod_uid("ListContainers", uid) if uid else None,
        name=labels.get(LABEL_CONTAINER_NAME) or item.metadata.name,
        state=_STATES.get(item.state, ContainerState.UNKNOWN),
        attempt=item.metadata.attempt,
        labels=labels,
        created_at=item.created_at,
    )


def container_status(resp: pb.ContainerStatusResponse, container_id: str) -> ContainerStatusInfo:
    """The status of the container `container_id` asked for (the id the runtime answers wins)."""
    st = resp.status
    resources = None
    if st.HasField("resources") and st.resources.HasField("linux"):
        try:
            resources = values_from_linux(st.resources.linux)
        except ValueError as err:
            raise InvalidResponse("ContainerStatus", "OK", str(err), container_id) from err
    cgroups_path, pid = parse_verbose_info(resp.info)
    return ContainerStatusInfo(
        id=_container_id("ContainerStatus", st.id or container_id),
        name=st.metadata.name,
        state=_STATES.get(st.state, ContainerState.UNKNOWN),
        resources=resources,
        cgroups_path=cgroups_path,
        attempt=st.metadata.attempt,
        pid=pid,
    )


def parse_verbose_info(info: Mapping[str, str]) -> tuple[str | None, int | None]:
    """(cgroupsPath, pid) from a verbose status: containerd and CRI-O put a JSON document under "info"."""
    for raw in info.values():
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        spec = doc.get("runtimeSpec")
        linux = spec.get("linux") if isinstance(spec, dict) else None
        path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
        pid = doc.get("pid")
        return (
            path if isinstance(path, str) and path else None,
            pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
        )
    return None, None


def _container_id(method: str, cid: str) -> ContainerID:
    try:
        return validate_container_id(cid)
    except ModelError as err:
        raise InvalidResponse(method, "OK", str(err)) from err


def _pod_uid(method: str, uid: str) -> PodUID:
    try:
        return validate_pod_uid(uid)
    except ModelError as err:
        raise InvalidResponse(method, "OK", str(err)) from err
