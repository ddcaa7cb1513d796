"""The fake runtime's state — sandboxes, containers, the call log, queued errors — and what a test does
with it: add and remove pods and containers, queue failures, assert on the calls. Kept apart from the
gRPC servicer so that what a test sets up reads without the protocol around it."""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from agent.cri.v1 import api_pb2 as pb

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


class RuntimeState:
    """What the runtime holds. `on_update(container, merged)` runs before an update is stored, so an
    integration test can mirror it into a fake cgroup tree; raising `Refuse` there fails the call."""

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

    def record_call(
        self, method: str, request: dict[str, Any], container_id: str = ""
    ) -> tuple[grpc.StatusCode, str] | None:
        """Log a call; the error queued for it (for its container first, then for the method), if any."""
        with self.lock:
            self.calls.append(Call(method, request))
            queued = self.targeted.get((method, container_id)) or self.errors.get(method)
            return queued.pop(0) if queued else None
