"""A small synchronous CRI client: the calls the agent makes to the runtime, each with its deadline.

The agent's only gRPC code, in three parts: `agent.cri.channel` (the connection, deadlines, retrying
UNAVAILABLE), `agent.cri.convert` (protobuf <-> `agent.cri.types`, and containerd's merge semantics of
an update), and here, the RuntimeService and ImageService calls the agent needs and what each means.
Failures surface as `agent.cri.errors` types, results as `agent.cri.types` dataclasses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Self

from agent.core.model import ContainerValues
from agent.cri import convert
from agent.cri.channel import RetryPolicy, RuntimeChannel
from agent.cri.errors import Unimplemented
from agent.cri.types import LABEL_POD_UID, Container, ContainerStatusInfo, RuntimeVersion, Sandbox
from agent.cri.v1 import api_pb2 as pb

KUBELET_CRI_VERSION: Final = "0.1.0"  # what the kubelet sends in VersionRequest (kuberuntime_manager.go)
_RETRY: Final = RetryPolicy()  # frozen, so one shared default is safe


class CRIClient:
    """A RuntimeService client bound to one endpoint. Thread-safe (one gRPC channel)."""

    def __init__(
        self,
        endpoint: str,
        timeout: float = 2.0,
        *,
        update_timeout: float = 10.0,
        retry: RetryPolicy = _RETRY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._channel = RuntimeChannel(endpoint, retry, sleep)
        self.endpoint = self._channel.endpoint
        self.timeout = timeout
        # runc update reclaims memory synchronously when a limit shrinks (hundreds of ms seen).
        self.update_timeout = max(update_timeout, timeout)

    # ---- lifecycle ----

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the calls ----

    def version(self) -> RuntimeVersion:
        resp = self._channel.call("Version", pb.VersionRequest(version=KUBELET_CRI_VERSION), timeout=self.timeout)
        return convert.runtime_version(resp)

    def list_sandboxes(self, pod_uid: str | None = None) -> list[Sandbox]:
        """All sandboxes, or a pod's (matched on the sandbox metadata's uid, labels or not)."""
        resp = self._channel.call("ListPodSandbox", pb.ListPodSandboxRequest(), timeout=self.timeout)
        sandboxes = [convert.sandbox(item) for item in resp.items]
        return [s for s in sandboxes if pod_uid is None or s.pod_uid == pod_uid]

    def list_containers(self, pod_uid: str | None = None, sandbox_id: str | None = None) -> list[Container]:
        """Containers in any state, filtered by the kubelet's pod-uid label and/or a sandbox."""
        filt = pb.ContainerFilter(
            pod_sandbox_id=sandbox_id or "",
            label_selector={LABEL_POD_UID: pod_uid} if pod_uid is not None else {},
        )
        resp = self._channel.call("ListContainers", pb.ListContainersRequest(filter=filt), timeout=self.timeout)
        return [convert.container(c) for c in resp.containers]

    def container_status(self, container_id: str, verbose: bool = False) -> ContainerStatusInfo:
        resp = self._channel.call(
            "ContainerStatus",
            pb.ContainerStatusRequest(container_id=container_id, verbose=verbose),
            container_id=container_id,
            timeout=self.timeout,
        )
        return convert.container_status(resp, container_id)

    def update_container_resources(self, container_id: str, values: ContainerValues) -> None:
        """Resize a container in place (synchronous: when this returns, runc has written the cgroup)."""
        request = pb.UpdateContainerResourcesRequest(
            container_id=container_id, linux=convert.linux_from_values(values)
        )
        self._channel.call(
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
            overhead=convert.linux_from_values(overhead) if overhead is not None else None,
            resources=convert.linux_from_values(resources) if resources is not None else None,
        )
        try:
            self._channel.call("UpdatePodSandboxResources", request, timeout=self.update_timeout)
        except Unimplemented:
            return False
        return True

    def stop_container(self, container_id: str, timeout_s: int) -> None:
        """Stop with a grace period of `timeout_s` seconds (0 kills at once); the deadline covers it."""
        request = pb.StopContainerRequest(container_id=container_id, timeout=timeout_s)
        self._channel.call(
            "StopContainer", request, container_id=container_id, timeout=timeout_s + self.update_timeout
        )

    # ---- images (the rollout's pre-pull) ----

    def image_present(self, image: str) -> bool:
        """Whether the runtime has the image (ImageStatus answers no image when it has none)."""
        request = pb.ImageStatusRequest(image=pb.ImageSpec(image=image))
        response = self._channel.call("ImageStatus", request, images=True, timeout=self.timeout)
        return response.HasField("image") and bool(response.image.id)

    def pull_image(self, image: str, timeout_s: float = 600.0) -> str:
        """Pull without credentials; the image's reference (ID or digest) as the runtime names it."""
        request = pb.PullImageRequest(image=pb.ImageSpec(image=image))
        response = self._channel.call("PullImage", request, images=True, timeout=timeout_s)
        return str(response.image_ref)
