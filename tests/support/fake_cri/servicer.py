"""The gRPC side of the fake runtime: the RuntimeService and ImageService rpcs the agent calls, answered
over `RuntimeState` the way containerd answers them (anchors §1.11, research/containerd-e2e.md):

* UpdateContainerResources merges: a zero field leaves the stored value unchanged, -1 is applied,
  hugepage limits are appended; the container's stored spec is what ContainerStatus reports.
* UpdatePodSandboxResources is UNIMPLEMENTED (containerd 1.6) unless `pod_resources_implemented`.
* NOT_FOUND for unknown container and sandbox IDs.
* A `Refuse(message)` from the `on_update` hook fails the update as containerd does (UNKNOWN, runc's
  message wrapped in containerd's text) and keeps the old spec.

Rpcs the fake does not implement answer UNIMPLEMENTED (the generated servicer base does that).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from tests.support.fake_cri.state import FakeContainer, Refuse, RuntimeState

RUNC_WRAP = (
    "failed to update resources: failed to update resources: "
    "runc did not terminate successfully: exit status 1: {}\n: unknown"
)


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


class FakeRuntimeService(RuntimeState, pb_grpc.RuntimeServiceServicer):
    """The servicer over the state. Tests drive it directly (add_*, inject_error) and through a real client."""

    # ---- plumbing ----

    def _enter(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        """Log the call, then fail it if an error is queued for the method."""
        request_data = MessageToDict(request, preserving_proto_field_name=True)
        error = self.record_call(method, request_data, getattr(request, "container_id", ""))
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
