"""A small synchronous CRI client: the agent's only gRPC code.

Every call carries a deadline; UNAVAILABLE (runtime down or restarting) is retried with bounded
exponential backoff, nothing else is (a DEADLINE_EXCEEDED update may still be applied by the runtime,
so it is the caller's decision). Failures surface as `agent.cri.errors` types, results as
`agent.cri.types` dataclasses.

`UpdateContainerResources` follows containerd's merge semantics (anchors §1.11; tests/e2e checks each
point below against containerd 1.6.20 + runc 1.1.5 on cgroup v1):
a zero field means "leave unchanged". Hence:
* an unlimited CPU quota is sent as -1 (0 would keep the old quota);
* an unlimited memory limit is sent as -1, which runc applies as "no limit" (0 would keep the old
  limit, so a limit can never be removed by sending 0);
* `cpu_period` / `cpu_shares` of 0 in `ContainerValues` leave those values unchanged;
* hugepage limits are appended to the stored spec, never replaced.
"""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

import grpc
from google.protobuf.message import Message

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
from agent.cri.errors import CRIError, InvalidResponse, Unimplemented, classify
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
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from agent.infra.errors import AgentError

KUBELET_CRI_VERSION: Final = "0.1.0"  # what the kubelet sends in VersionRequest (kuberuntime_manager.go)
DEFAULT_ENDPOINTS: Final = (
    "unix:///run/containerd/containerd.sock",
    "unix:///run/crio/crio.sock",
    "unix:///var/run/cri-dockerd.sock",
)
_MAX_MESSAGE: Final = 16 * 1024 * 1024  # the kubelet's maxMsgSize
_STATES: Final = {
    pb.CONTAINER_CREATED: ContainerState.CREATED,
    pb.CONTAINER_RUNNING: ContainerState.RUNNING,
    pb.CONTAINER_EXITED: ContainerState.EXITED,
    pb.CONTAINER_UNKNOWN: ContainerState.UNKNOWN,
}


class NoRuntimeSocket(AgentError):
    """No CRI socket was given and none of the usual ones exists."""

    retryable = True

    def __init__(self, candidates: Iterable[str]) -> None:
        self.candidates = tuple(candidates)
        super().__init__(
            "no container runtime socket found (tried "
            + ", ".join(self.candidates)
            + "): is the runtime running? Otherwise pass --cri-endpoint"
        )


def socket_path(endpoint: str) -> str | None:
    """The filesystem path of a unix endpoint ("unix:///run/x.sock", "unix:/x", "/x"), else None."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :] or None
    if endpoint.startswith("unix:"):
        return endpoint[len("unix:") :] or None
    if endpoint.startswith("/"):
        return endpoint
    return None


def normalize_endpoint(endpoint: str) -> str:
    """A gRPC target: a bare absolute path becomes "unix://<path>"; anything else is kept."""
    return f"unix://{endpoint}" if endpoint.startswith("/") else endpoint


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(Path(path).stat().st_mode)
    except OSError:
        return False


def autodetect_endpoint(
    candidates: Iterable[str] = DEFAULT_ENDPOINTS, is_socket: Callable[[str], bool] = _is_socket
) -> str:
    """The first candidate whose unix socket exists (containerd, CRI-O, cri-dockerd, in that order)."""
    tried = tuple(candidates)
    for endpoint in tried:
        path = socket_path(endpoint)
        if path is not None and is_socket(path):
            return normalize_endpoint(endpoint)
    raise NoRuntimeSocket(tried)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry UNAVAILABLE only: `attempts` calls in total, sleeping backoff, backoff*multiplier, ..."""

    attempts: int = 4
    initial_backoff: float = 0.05
    multiplier: float = 2.0
    max_backoff: float = 1.0

    def delays(self) -> list[float]:
        """The sleeps between attempts (one fewer than attempts)."""
        out, delay = [], self.initial_backoff
        for _ in range(max(self.attempts - 1, 0)):
            out.append(min(delay, self.max_backoff))
            delay *= self.multiplier
        return out


class CRIClient:
    """A RuntimeService client bound to one endpoint. Thread-safe (one gRPC channel)."""

    def __init__(
        self,
        endpoint: str,
        timeout: float = 2.0,
        *,
        update_timeout: float = 10.0,
        retry: RetryPolicy = RetryPolicy(),  # frozen, so a shared default is safe
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = normalize_endpoint(endpoint)
        self.timeout = timeout
        # runc update reclaims memory synchronously when a limit shrinks (hundreds of ms seen).
        self.update_timeout = max(update_timeout, timeout)
        self._retry = retry
        self._sleep = sleep
        self._channel = grpc.insecure_channel(
            self.endpoint,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.max_send_message_length", _MAX_MESSAGE),
                # reconnect quickly after a runtime restart, so our own retries can succeed
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )
        self._stub = pb_grpc.RuntimeServiceStub(self._channel)
        self._images = pb_grpc.ImageServiceStub(self._channel)

    # ---- lifecycle ----

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the calls ----

    def version(self) -> RuntimeVersion:
        resp: pb.VersionResponse = self._call("Version", pb.VersionRequest(version=KUBELET_CRI_VERSION))
        return RuntimeVersion(
            version=resp.version,
            runtime_name=resp.runtime_name,
            runtime_version=resp.runtime_version,
            runtime_api_version=resp.runtime_api_version,
        )

    def list_sandboxes(self, pod_uid: str | None = None) -> list[Sandbox]:
        """All sandboxes, or a pod's (matched on the sandbox metadata's uid, labels or not)."""
        resp: pb.ListPodSandboxResponse = self._call("ListPodSandbox", pb.ListPodSandboxRequest())
        sandboxes = [_sandbox(item) for item in resp.items]
        return [s for s in sandboxes if pod_uid is None or s.pod_uid == pod_uid]

    def list_containers(self, pod_uid: str | None = None, sandbox_id: str | None = None) -> list[Container]:
        """Containers in any state, filtered by the kubelet's pod-uid label and/or a sandbox."""
        filt = pb.ContainerFilter(
            pod_sandbox_id=sandbox_id or "",
            label_selector={LABEL_POD_UID: pod_uid} if pod_uid is not None else {},
        )
        resp: pb.ListContainersResponse = self._call("ListContainers", pb.ListContainersRequest(filter=filt))
        return [_container(c) for c in resp.containers]

    def container_status(self, container_id: str, verbose: bool = False) -> ContainerStatusInfo:
        resp: pb.ContainerStatusResponse = self._call(
            "ContainerStatus",
            pb.ContainerStatusRequest(container_id=container_id, verbose=verbose),
            container_id=container_id,
        )
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

    def update_container_resources(self, container_id: str, values: ContainerValues) -> None:
        """Resize a container in place (synchronous: when this returns, runc has written the cgroup)."""
        request = pb.UpdateContainerResourcesRequest(
            container_id=container_id, linux=linux_from_values(values)
        )
        self._call(
            "UpdateContainerResources", request, container_id=container_id, timeout=self.update_timeout
        )

    def update_pod_sandbox_resources(
        self, sandbox_id: str, overhead: ContainerValues | None, resources: ContainerValues | None
    ) -> bool:
        """Tell the runtime of a pod's new resources (CRI 1.33+). False when the runtime lacks the rpc.

        The runtime does not write the pod cgroup either way (containerd only records the values and
        runs NRI hooks), so the caller writes the pod cgroup itself in both cases.
        """
        request = pb.UpdatePodSandboxResourcesRequest(
            pod_sandbox_id=sandbox_id,
            overhead=linux_from_values(overhead) if overhead is not None else None,
            resources=linux_from_values(resources) if resources is not None else None,
        )
        try:
            self._call("UpdatePodSandboxResources", request, timeout=self.update_timeout)
        except Unimplemented:
            return False
        return True

    def stop_container(self, container_id: str, timeout_s: int) -> None:
        """Stop with a grace period of `timeout_s` seconds (0 kills at once); the deadline covers it."""
        request = pb.StopContainerRequest(container_id=container_id, timeout=timeout_s)
        self._call(
            "StopContainer", request, container_id=container_id, timeout=timeout_s + self.update_timeout
        )

    # ---- images (the rollout's pre-pull) ----

    def image_present(self, image: str) -> bool:
        """Whether the runtime has the image (ImageStatus answers no image when it has none)."""
        response = self._call("ImageStatus", pb.ImageStatusRequest(image=pb.ImageSpec(image=image)), images=True)
        return response.HasField("image") and bool(response.image.id)

    def pull_image(self, image: str, timeout_s: float = 600.0) -> str:
        """Pull without credentials; the image's reference (ID or digest) as the runtime names it."""
        response = self._call("PullImage", pb.PullImageRequest(image=pb.ImageSpec(image=image)), images=True, timeout=timeout_s)
        return str(response.image_ref)

    # ---- plumbing ----

    def _call(
        self,
        rpc: str,
        request: Message,
        *,
        container_id: str | None = None,
        timeout: float | None = None,
        images: bool = False,
    ) -> Any:
        method = getattr(self._images if images else self._stub, rpc)
        delays = self._retry.delays()
        for attempt in range(len(delays) + 1):
            try:
                return method(request, timeout=timeout if timeout is not None else self.timeout)
            except grpc.RpcError as rpc_err:
                code = _code_name(rpc_err)
                details = str(rpc_err.details() or "") if hasattr(rpc_err, "details") else str(rpc_err)
                if code == "UNAVAILABLE" and attempt < len(delays):
                    self._sleep(delays[attempt])
                    continue
                if code == "UNAVAILABLE":
                    details = self._unavailable_message(details)
                raise classify(rpc, code, details, container_id) from rpc_err
        raise AssertionError("unreachable")  # pragma: no cover

    def _unavailable_message(self, details: str) -> str:
        path = socket_path(self.endpoint)
        if path is None:
            return f"container runtime at {self.endpoint} is not answering: {details}"
        if not Path(path).exists():
            return f"container runtime socket {path} does not exist (is the runtime running?): {details}"
        return f"container runtime socket {path} is not answering (is the runtime running?): {details}"


def _code_name(err: Any) -> str:
    code = err.code() if hasattr(err, "code") else None
    return str(getattr(code, "name", "UNKNOWN"))


# ---- protobuf <-> agent types (pure) ----


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


def _sandbox(item: pb.PodSandbox) -> Sandbox:
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


def _container(item: pb.Container) -> Container:
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


__all__ = [
    "DEFAULT_ENDPOINTS",
    "CRIClient",
    "CRIError",
    "NoRuntimeSocket",
    "RetryPolicy",
    "autodetect_endpoint",
    "linux_from_values",
    "normalize_endpoint",
    "parse_verbose_info",
    "socket_path",
    "values_from_linux",
]
