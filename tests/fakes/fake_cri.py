"""An in-process fake CRI runtime: a real gRPC server on a unix socket, with plain state behind it.

Modelled on cri-api's FakeRuntimeService (pkg/apis/testing/fake_runtime_service.go): state dicts of
sandboxes and containers, a call log, and injected errors popped per method. It adds what the agent
relies on from containerd (anchors §1.11, research/containerd-e2e.md):

* UpdateContainerResources merges: a zero field leaves the stored value unchanged, -1 is applied,
  hugepage limits are appended; the container's stored spec is what ContainerStatus reports.
* UpdatePodSandboxResources is UNIMPLEMENTED (containerd 1.6) unless `pod_resources_implemented`.
* NOT_FOUND for unknown container and sandbox IDs.
* `on_update(container, merged)` runs before an update is stored, so an integration test can mirror it
  into a fake cgroup tree; raising `Refuse(message)` there fails the call as containerd does (UNKNOWN,
  runc's message wrapped in containerd's text) and keeps the old spec.

Rpcs the fake does not implement answer UNIMPLEMENTED (the generated servicer base does that).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc

RUNC_WRAP = (
    "failed to update resources: failed to update resources: "
    "runc did not terminate successfully: exit status 1: {}\n: unknown"
)
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"


class Refuse(Exception):
    """Raised by an `on_update` hook: fail the update with this runc message (UNKNOWN, spec kept)."""


@dataclass(frozen=True)
class Call:
    method: str
    request: dict[str, Any]  # the request as JSON-ish data (proto field names)


@dataclass
class FakeSandbox:
    id: str
    uid: str
    name: str
    namespace: str
    state: int = pb.SANDBOX_READY
    labels: dict[str, str] = field(default_factory=dict)
    attempt: int = 0
    created_at: int = 0
    cgroup_parent: str = ""
    overhead: pb.LinuxContainerResources | None = None
    resources: pb.LinuxContainerResources | None = None


@dataclass
class FakeContainer:
    id: str
    sandbox_id: str
    name: str
    attempt: int = 0
    state: int = pb.CONTAINER_RUNNING
    labels: dict[str, str] = field(default_factory=dict)
    created_at: int = 0
    resources: pb.LinuxContainerResources = field(default_factory=pb.LinuxContainerResources)
    cgroups_path: str = ""
    pid: int = 0


def merge_resources(
    old: pb.LinuxContainerResources, new: pb.LinuxContainerResources
) -> pb.LinuxContainerResources:
    """containerd's opts.WithResources: zero = unchanged, hugepages appended, unified merged."""
    out = pb.LinuxContainerResources()
    out.CopyFrom(old)
    for name in (
        "cpu_period",
        "cpu_quota",
        "cpu_shares",
        "memory_limit_in_bytes",
        "oom_score_adj",
        "memory_swap_limit_in_bytes",
        "cpuset_cpus",
        "cpuset_mems",
    ):
        value = getattr(new, name)
        if value:
            setattr(out, name, value)
    out.hugepage_limits.extend(new.hugepage_limits)
    out.unified.update(new.unified)
    return out


def _match(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class FakeRuntimeService(pb_grpc.RuntimeServiceServicer):
    """The servicer. Tests drive it directly (add_*, inject_error) and through a real client."""

    def __init__(self, runtime_name: str = "fake-containerd") -> None:
        self.runtime_name = runtime_name
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.containers: dict[str, FakeContainer] = {}
        self.calls: list[Call] = []
        self.errors: dict[str, list[tuple[grpc.StatusCode, str]]] = {}
        self.targeted: dict[tuple[str, str], list[tuple[grpc.StatusCode, str]]] = {}  # (method, container id)
        self.pod_resources_implemented = False
        self.on_update: Callable[[FakeContainer, pb.LinuxContainerResources], None] | None = None
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self._clock = itertools.count(1_700_000_000_000_000_000, 1_000)

    # ---- test-side API ----

    def _new_id(self, kind: str) -> str:
        return hashlib.sha256(f"{kind}-{next(self._ids)}".encode()).hexdigest()

    def add_sandbox(
        self,
        uid: str,
        name: str = "pod",
        namespace: str = "default",
        *,
        ready: bool = True,
        attempt: int = 0,
        cgroup_parent: str = "",
        labels: Mapping[str, str] | None = None,
    ) -> FakeSandbox:
        kubelet_labels = {LABEL_POD_UID: uid, LABEL_POD_NAME: name, LABEL_POD_NAMESPACE: namespace}
        sandbox = FakeSandbox(
            id=self._new_id("sandbox"),
            uid=uid,
            name=name,
            namespace=namespace,
            state=pb.SANDBOX_READY if ready else pb.SANDBOX_NOTREADY,
            labels={**kubelet_labels, **(labels or {})},
            attempt=attempt,
            created_at=next(self._clock),
            cgroup_parent=cgroup_parent or f"/kubepods/burstable/pod{uid}",
        )
        with self.lock:
            self.sandboxes[sandbox.id] = sandbox
        return sandbox

    def add_container(
        self,
        sandbox: FakeSandbox,
        name: str,
        *,
        attempt: int = 0,
        state: int = pb.CONTAINER_RUNNING,
        resources: pb.LinuxContainerResources | None = None,
        labels: Mapping[str, str] | None = None,
        kubelet_labels: bool = True,
        container_id: str | None = None,
    ) -> FakeContainer:
        base = (
            {
                LABEL_POD_UID: sandbox.uid,
                LABEL_POD_NAME: sandbox.name,
                LABEL_POD_NAMESPACE: sandbox.namespace,
                LABEL_CONTAINER_NAME: name,
            }
            if kubelet_labels
            else {}
        )
        cid = container_id or self._new_id("container")
        container = FakeContainer(
            id=cid,
            sandbox_id=sandbox.id,
            name=name,
            attempt=attempt,
            state=state,
            labels={**base, **(labels or {})},
            created_at=next(self._clock),
            resources=resources if resources is not None else pb.LinuxContainerResources(cpu_shares=2),
            cgroups_path=f"{sandbox.cgroup_parent}/{cid}",
            pid=4000 + next(self._ids),
        )
        with self.lock:
            self.containers[container.id] = container
        return container

    def remove_sandbox(self, sandbox_id: str) -> None:
        """The sandbox and its containers are gone (the kubelet's RemovePodSandbox after a pod's deletion)."""
        with self.lock:
            del self.sandboxes[sandbox_id]
            for cid in [c.id for c in self.containers.values() if c.sandbox_id == sandbox_id]:
                del self.containers[cid]

    def inject_error(
        self,
        method: str,
        code: grpc.StatusCode,
        message: str = "injected",
        times: int = 1,
        container_id: str | None = None,
    ) -> None:
        """The next `times` calls of `method` (for `container_id` only, when given) fail with
        (code, message) before touching any state."""
        with self.lock:
            if container_id is None:
                self.errors.setdefault(method, []).extend([(code, message)] * times)
            else:
                self.targeted.setdefault((method, container_id), []).extend([(code, message)] * times)

    def methods(self) -> list[str]:
        with self.lock:
            return [c.method for c in self.calls]

    def assert_calls(self, expected: list[str]) -> None:
        """cri-api's AssertCalls: exactly these methods were called, in this order."""
        assert self.methods() == expected, f"calls {self.methods()} != expected {expected}"

    def calls_of(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    # ---- plumbing ----

    def _enter(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        """Log the call, then fail it if an error is queued for the method."""
        with self.lock:
            self.calls.append(Call(method, MessageToDict(request, preserving_proto_field_name=True)))
            queued = self.targeted.get((method, getattr(request, "container_id", ""))) or self.errors.get(method)
            error = queued.pop(0) if queued else None
        if error is not None:
            context.abort(error[0], error[1])

    def _container(self, cid: str, context: grpc.ServicerContext) -> FakeContainer:
        container = self.containers.get(cid)
        if container is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND, f'an error occurred when try to find container "{cid}": not found'
            )
        return container  # type: ignore[return-value]  # abort raises

    def _pb_container(self, c: FakeContainer) -> pb.Container:
        return pb.Container(
            id=c.id,
            pod_sandbox_id=c.sandbox_id,
            metadata=pb.ContainerMetadata(name=c.name, attempt=c.attempt),
            state=c.state,
            created_at=c.created_at,
            labels=c.labels,
        )

    def _pb_status(self, c: FakeContainer) -> pb.ContainerStatus:
        return pb.ContainerStatus(
            id=c.id,
            metadata=pb.ContainerMetadata(name=c.name, attempt=c.attempt),
            state=c.state,
            created_at=c.created_at,
            labels=c.labels,
            resources=pb.ContainerResources(linux=c.resources),
        )

    # ---- the rpcs ----

    def Version(self, request: pb.VersionRequest, context: grpc.ServicerContext) -> pb.VersionResponse:
        self._enter("Version", request, context)
        return pb.VersionResponse(
            version="0.1.0",
            runtime_name=self.runtime_name,
            runtime_version="1.6.20-fake",
            runtime_api_version="v1",
        )

    def ListPodSandbox(
        self, request: pb.ListPodSandboxRequest, context: grpc.ServicerContext
    ) -> pb.ListPodSandboxResponse:
        self._enter("ListPodSandbox", request, context)
        f = request.filter
        with self.lock:
            items = [
                pb.PodSandbox(
                    id=s.id,
                    metadata=pb.PodSandboxMetadata(
                        name=s.name, uid=s.uid, namespace=s.namespace, attempt=s.attempt
                    ),
                    state=s.state,
                    created_at=s.created_at,
                    labels=s.labels,
                )
                for s in self.sandboxes.values()
                if (not f.id or s.id == f.id)
                and (not f.HasField("state") or s.state == f.state.state)
                and _match(s.labels, f.label_selector)
            ]
        return pb.ListPodSandboxResponse(items=items)

    def PodSandboxStatus(
        self, request: pb.PodSandboxStatusRequest, context: grpc.ServicerContext
    ) -> pb.PodSandboxStatusResponse:
        self._enter("PodSandboxStatus", request, context)
        s = self.sandboxes.get(request.pod_sandbox_id)
        if s is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"an error occurred when try to find sandbox {request.pod_sandbox_id!r}: not found",
            )
        assert s is not None
        status = pb.PodSandboxStatus(
            id=s.id,
            metadata=pb.PodSandboxMetadata(name=s.name, uid=s.uid, namespace=s.namespace, attempt=s.attempt),
            state=s.state,
            created_at=s.created_at,
            labels=s.labels,
        )
        return pb.PodSandboxStatusResponse(status=status)

    def ListContainers(
        self, request: pb.ListContainersRequest, context: grpc.ServicerContext
    ) -> pb.ListContainersResponse:
        self._enter("ListContainers", request, context)
        f = request.filter
        with self.lock:
            found = [
                self._pb_container(c)
                for c in self.containers.values()
                if (not f.id or c.id == f.id)
                and (not f.pod_sandbox_id or c.sandbox_id == f.pod_sandbox_id)
                and (not f.HasField("state") or c.state == f.state.state)
                and _match(c.labels, f.label_selector)
            ]
        return pb.ListContainersResponse(containers=found)

    def ContainerStatus(
        self, request: pb.ContainerStatusRequest, context: grpc.ServicerContext
    ) -> pb.ContainerStatusResponse:
        self._enter("ContainerStatus", request, context)
        with self.lock:
            c = self._container(request.container_id, context)
            status = self._pb_status(c)
            info = {}
            if request.verbose:
                info["info"] = json.dumps(
                    {
                        "pid": c.pid,
                        "runtimeSpec": {
                            "linux": {"cgroupsPath": c.cgroups_path, "resources": MessageToDict(c.resources)}
                        },
                    }
                )
        return pb.ContainerStatusResponse(status=status, info=info)

    def UpdateContainerResources(
        self, request: pb.UpdateContainerResourcesRequest, context: grpc.ServicerContext
    ) -> pb.UpdateContainerResourcesResponse:
        self._enter("UpdateContainerResources", request, context)
        with self.lock:
            c = self._container(request.container_id, context)
            if not request.HasField("linux"):
                return pb.UpdateContainerResourcesResponse()  # containerd: OK, nothing changes
            merged = merge_resources(c.resources, request.linux)
            if self.on_update is not None:
                try:
                    self.on_update(c, merged)
                except Refuse as refusal:
                    context.abort(grpc.StatusCode.UNKNOWN, RUNC_WRAP.format(refusal))
            c.resources = merged
        return pb.UpdateContainerResourcesResponse()

    def UpdatePodSandboxResources(
        self, request: pb.UpdatePodSandboxResourcesRequest, context: grpc.ServicerContext
    ) -> pb.UpdatePodSandboxResourcesResponse:
        self._enter("UpdatePodSandboxResources", request, context)
        if not self.pod_resources_implemented:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "unknown method UpdatePodSandboxResources for service runtime.v1.RuntimeService",
            )
        with self.lock:
            s = self.sandboxes.get(request.pod_sandbox_id)
            if s is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"sandbox {request.pod_sandbox_id!r}: not found")
            assert s is not None
            s.overhead = request.overhead if request.HasField("overhead") else None
            s.resources = request.resources if request.HasField("resources") else None
        return pb.UpdatePodSandboxResourcesResponse()

    def StopContainer(
        self, request: pb.StopContainerRequest, context: grpc.ServicerContext
    ) -> pb.StopContainerResponse:
        self._enter("StopContainer", request, context)
        with self.lock:
            self._container(request.container_id, context).state = pb.CONTAINER_EXITED
        return pb.StopContainerResponse()


class FakeImageService(pb_grpc.ImageServiceServicer):
    """ImageStatus and PullImage over a set of present images; calls and queued errors are kept on the
    runtime servicer (`calls_of("PullImage")`), so one fake records everything."""

    def __init__(self, runtime: FakeRuntimeService) -> None:
        self.runtime = runtime
        self.present: set[str] = set()

    def ImageStatus(self, request: pb.ImageStatusRequest, context: grpc.ServicerContext) -> pb.ImageStatusResponse:
        self.runtime._enter("ImageStatus", request, context)
        ref = request.image.image
        if ref in self.present:
            return pb.ImageStatusResponse(image=pb.Image(id="sha256:" + hashlib.sha256(ref.encode()).hexdigest()))
        return pb.ImageStatusResponse()

    def PullImage(self, request: pb.PullImageRequest, context: grpc.ServicerContext) -> pb.PullImageResponse:
        self.runtime._enter("PullImage", request, context)
        self.present.add(request.image.image)
        return pb.PullImageResponse(image_ref="sha256:" + hashlib.sha256(request.image.image.encode()).hexdigest())


@dataclass
class FakeCRI:
    """A running fake: `service` holds the state, `endpoint` is what a CRIClient connects to."""

    service: FakeRuntimeService
    endpoint: str
    socket: Path
    server: grpc.Server
    images: FakeImageService


def _socket_path(directory: Path) -> tuple[Path, Path | None]:
    """`<dir>/cri.sock`, or a short private dir when that exceeds the 107-byte sun_path limit."""
    path = directory / "cri.sock"
    if len(str(path)) <= 100:
        return path, None
    short = Path(tempfile.mkdtemp(prefix="cri"))
    return short / "cri.sock", short


@contextmanager
def running_fake_cri(directory: Path, service: FakeRuntimeService | None = None) -> Iterator[FakeCRI]:
    """Serve a FakeRuntimeService on `unix:<directory>/cri.sock` for the duration of the block."""
    service = service or FakeRuntimeService()
    sock, extra_dir = _socket_path(directory)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_RuntimeServiceServicer_to_server(service, server)
    images = FakeImageService(service)
    pb_grpc.add_ImageServiceServicer_to_server(images, server)
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    try:
        yield FakeCRI(service=service, endpoint=f"unix://{sock}", socket=sock, server=server, images=images)
    finally:
        server.stop(grace=None).wait()
        sock.unlink(missing_ok=True)
        if extra_dir is not None:
            extra_dir.rmdir()
