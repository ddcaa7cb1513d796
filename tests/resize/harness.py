"""A node for resize tests: a strict fake cgroup tree (v1), or this host's kernel below a private root
(`node_on_kernel`), and the in-process fake CRI server mirroring each UpdateContainerResources into the
container's cgroup as runc would. The node plays the kubelet (pods and containers created, a stopped
container started again) and runc (refusing what the kernel would: a quota ratio above the pod's, EINVAL,
and a memory limit below usage, EBUSY), and journals every write from both sides (`journal`), checking
the invariant (`invariant`) after each: `violations` collects any breach; tests assert it stays empty.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from agent.config.values import parse_allocatable
from agent.core.compute import compute_pod
from agent.core.compute.container import compute_container
from agent.core.model import ContainerID, ContainerValues, PodView
from agent.core.plan import CgroupStep
from agent.cri.client import CRIClient
from agent.cri.v1 import api_pb2 as pb
from agent.pipeline import Environment, owned_roots
from agent.pipeline.execute import CgroupStepRunner, file_runner
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.state import Timing
from agent.resize.store import PodStore
from cgroupfs.convert import V1_UNLIMITED_READBACK
from cgroupfs.files import CgroupFiles
from cgroupfs.naming import cgroup_dir, container_dir
from cgroupfs.types import DriverKind
from tests.resize.invariant import memory_limit, quota_ratio, violations
from tests.resize.journal import Event
from tests.resize.kubelet import kubelet_mismatches
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import FakeCRI, running_fake_cri
from tests.support.fake_cri.state import FakeContainer, FakeSandbox, Refuse
from tests.support.kernel import KernelRoot
from tests.support.kernel_tree import KernelTree


def cid_for(pod: str, container: str, attempt: int = 0) -> str:
    return hashlib.sha256(f"{pod}/{container}/{attempt}".encode()).hexdigest()


@dataclass
class PodInfo:
    raw: dict[str, Any]
    pod_dir: str  # below each mount
    containers: dict[str, str] = field(default_factory=dict)  # name -> current container id
    attempts: dict[str, int] = field(default_factory=dict)
    # name -> status.containerStatuses[].allocatedResources, as a kubelet that resizes reports it
    allocated: dict[str, dict[str, str]] = field(default_factory=dict)


class ResizeNode:
    def __init__(
        self,
        tree: FakeCgroupTree | KernelTree,
        cri: FakeCRI,
        state_dir: Path,
        allocatable: str = "cpu=8,memory=16Gi",
        **settings: Any,
    ) -> None:
        self.tree = tree
        self.cri = cri
        self.settings = Settings(
            cgroupfs=tree.root,
            cri_endpoint=cri.endpoint,
            allocatable=parse_allocatable(allocatable),
            hugepage_sizes=(),
            state_dir=state_dir,
            cgroup_version="1",
            **settings,
        )
        self.files = CgroupFiles(tree.root, owned_roots(self.settings, tree.hierarchy))
        self.env = Environment(self.settings, tree.hierarchy, (), self.files)
        prefix = self.settings.cgroup_root.strip("/")
        for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            tree.create(f"{prefix}/{tier}" if prefix else tier, ["cpu", "memory"])
        self.pods: dict[str, PodInfo] = {}
        self.events: list[Event] = []
        self.violations: list[str] = []
        self.fail_writes: set[int] = set()  # indexes of agent cgroup writes that fail
        self.fail_updates: set[int] = set()  # indexes of UpdateContainerResources calls that fail
        self.updates = 0
        self.writes = 0
        self.client = CRIClient(cri.endpoint)
        self.restart_on_stop = True  # play the kubelet: start a stopped container again, new ID
        self.on_event: Callable[[Event], None] | None = None
        # after each write: the whole node checked, or (False) only the pod written, which keeps a
        # runtime update O(1) on a node of a thousand pods (a soak); `check()` still sees everything
        self.check_every_pod = True
        self._sandbox: dict[str, FakeSandbox] = {}
        cri.service.on_update = self._on_update

    # ---- pods ----

    def add_pod(self, raw: dict[str, Any]) -> PodView:
        view = parse_pod(raw)
        comp = compute_pod(view, self.settings.compute_config(()))
        pod_dir = cgroup_dir(comp.cgroup, DriverKind.CGROUPFS)
        self.tree.create(pod_dir, ["cpu", "memory"])
        sandbox = self.cri.service.add_sandbox(
            view.uid, view.name, view.namespace, cgroup_parent="/" + pod_dir
        )
        info = PodInfo(raw, pod_dir)
        self.pods[view.name] = info
        self._sandbox[view.name] = sandbox
        for cc in comp.containers:  # the kubelet creates each container with its values
            self._start_container(view.name, cc.container.name, 0, cc.values)
        return self.view(view.name)

    def _start_container(
        self, pod: str, name: str, attempt: int, values: ContainerValues | None = None
    ) -> None:
        info = self.pods[pod]
        cid = cid_for(pod, name, attempt)
        info.containers[name] = cid
        info.attempts[name] = attempt
        self.tree.create(container_dir(info.pod_dir, cid, DriverKind.CGROUPFS), ["cpu", "memory"])
        self.cri.service.add_container(self._sandbox[pod], name, container_id=cid, attempt=attempt)
        if values is not None:  # the kubelet creates it with its values (runc writes them at create)
            self._write_container(
                cid, values.cpu_shares, values.cpu_quota, values.cpu_period, values.memory_limit
            )

    def remove_pod(self, name: str) -> None:
        """The kubelet's teardown of a deleted pod: its sandbox and containers leave the runtime (calls for
        them answer NOT_FOUND from then on), then the pod and container cgroups are removed."""
        self.cri.service.remove_sandbox(self._sandbox.pop(name).id)
        info = self.pods.pop(name)
        for controller in ("cpu", "memory"):
            self.tree.remove(f"{controller}/{info.pod_dir}")

    def resize(self, pod: str, containers: dict[str, dict[str, Any]]) -> PodView:
        """Change the pod spec's resources (the /resize subresource): name -> {"requests":.., "limits":..}."""
        for c in self.pods[pod].raw["spec"]["containers"]:
            if c["name"] in containers:
                c["resources"] = {k: dict(v) for k, v in containers[c["name"]].items()}
        return self.view(pod)

    def set_allocatable(self, text: str) -> None:
        """The node's allocatable (`cpu=2,memory=2Gi`), in the settings and the environment built from them."""
        self.settings = replace(self.settings, allocatable=parse_allocatable(text))
        self.env = Environment(self.settings, self.env.hierarchy, (), self.files)

    def view(self, pod: str) -> PodView:
        return parse_pod(self.raw(pod))

    def raw(self, pod: str) -> dict[str, Any]:
        """The pod as the API would show it: the spec plus a status naming each container's ID."""
        info = self.pods[pod]
        raw = dict(info.raw)
        raw["status"] = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": n,
                    "containerID": f"containerd://{cid}",
                    "state": {"running": {}},
                    **({"allocatedResources": info.allocated[n]} if n in info.allocated else {}),
                }
                for n, cid in info.containers.items()
            ],
        }
        return raw

    def views(self) -> list[PodView]:
        return [self.view(p) for p in self.pods]

    def container_path(self, pod: str, name: str, filename: str) -> str:
        controller = "memory" if filename.startswith("memory.") else "cpu"
        info = self.pods[pod]
        return f"{controller}/{info.pod_dir}/{info.containers[name]}/{filename}"

    def pod_path(self, pod: str, filename: str) -> str:
        controller = "memory" if filename.startswith("memory.") else "cpu"
        return f"{controller}/{self.pods[pod].pod_dir}/{filename}"

    def set_usage(self, pod: str, container: str | None, usage: int) -> None:
        path = (
            self.pod_path(pod, "memory.usage_in_bytes")
            if container is None
            else self.container_path(pod, container, "memory.usage_in_bytes")
        )
        self.tree.set(path, str(usage))

    def read(self, relpath: str) -> str:
        return self.tree.read(relpath)

    # ---- the engine ----

    def engine(self, timing: Timing | None = None, clock: Callable[[], float] | None = None) -> ResizeEngine:
        return ResizeEngine(
            self.settings,
            self.env,
            _Runtime(self.client, self._stopped),
            store=PodStore(self.settings.state_dir),
            cgroup=self._runner(file_runner(self.files)),
            timing=timing or Timing(backoff_base_s=0.0, backoff_cap_s=0.0, deferred_retry_s=0.0),
            **({"clock": clock} if clock else {}),
        )

    def _runner(self, inner: CgroupStepRunner) -> CgroupStepRunner:
        def run(step: CgroupStep) -> int:
            index = self.writes
            self.writes += 1
            if index in self.fail_writes:
                raise OSError(5, f"injected failure of write #{index}", step.path)
            old = self.read(step.path)
            n = inner(step)
            self._record(Event("write", step.path, step.setting.value, old))
            return n

        return run

    def _record(self, event: Event, pod: str | None = None) -> None:
        self.events.append(event)
        self.violations.extend(self.check(None if self.check_every_pod or pod is None else [pod]))
        if self.on_event is not None:
            self.on_event(event)

    # ---- the runtime (runc's side of UpdateContainerResources and StopContainer) ----

    def _find(self, cid: str) -> tuple[str, str]:
        for pod, info in list(self.pods.items()):  # a copy: pods come and go on another thread in a soak
            for name, c in info.containers.items():
                if c == cid:
                    return pod, name
        raise KeyError(cid)

    def _write_container(self, cid: str, shares: int, quota: int, period: int, memory: int) -> None:
        pod, name = self._find(cid)
        if memory:
            path = self.container_path(pod, name, "memory.usage_in_bytes")
            usage = int(self.read(path))
            if memory > 0 and memory < usage:
                raise Refuse(f"failed to write {memory} to memory.limit_in_bytes: device or resource busy")
            self._runc_write(
                self.container_path(pod, name, "memory.limit_in_bytes"),
                str(memory // 4096 * 4096 if memory > 0 else V1_UNLIMITED_READBACK),
            )
        if quota or period:
            period = period or int(self.read(self.container_path(pod, name, "cpu.cfs_period_us")))
            quota = quota or int(self.read(self.container_path(pod, name, "cpu.cfs_quota_us")))
            pod_ratio = quota_ratio(
                self.read(self.pod_path(pod, "cpu.cfs_quota_us")),
                self.read(self.pod_path(pod, "cpu.cfs_period_us")),
            )
            if quota_ratio(str(quota), str(period)) > pod_ratio:
                raise Refuse(f"failed to write {quota} to cpu.cfs_quota_us: invalid argument")
            self._runc_write(self.container_path(pod, name, "cpu.cfs_period_us"), str(period))
            self._runc_write(self.container_path(pod, name, "cpu.cfs_quota_us"), str(quota))
        if shares:
            self._runc_write(self.container_path(pod, name, "cpu.shares"), str(shares))

    def _runc_write(self, relpath: str, value: str) -> None:
        """runc's write of one container file; a kernel refusal (a real tree) fails the update with
        runc's message, as containerd reports it."""
        try:
            self.tree.set(relpath, value)
        except OSError as err:
            reason = (err.strerror or str(err)).lower()
            raise Refuse(f'failed to write "{value}": write {self.tree.path(relpath)}: {reason}') from err

    def container_state(self, pod: str, name: str) -> tuple[float, float, int]:
        """(cpu limit as quota/period, memory limit, shares) as the container's cgroup shows them."""
        q = self.read(self.container_path(pod, name, "cpu.cfs_quota_us"))
        p = self.read(self.container_path(pod, name, "cpu.cfs_period_us"))
        m = memory_limit(self.read(self.container_path(pod, name, "memory.limit_in_bytes")))
        return quota_ratio(q, p), m, int(self.read(self.container_path(pod, name, "cpu.shares")))

    def _on_update(self, container: FakeContainer, merged: pb.LinuxContainerResources) -> None:
        index = self.updates
        self.updates += 1
        if index in self.fail_updates:
            raise Refuse(f"injected failure of update #{index}")
        pod, name = self._find(container.id)
        old = self.container_state(pod, name)
        self._write_container(
            container.id, merged.cpu_shares, merged.cpu_quota, merged.cpu_period, merged.memory_limit_in_bytes
        )
        self._record(Event("update", f"{pod}/{name}", self.container_state(pod, name), old), pod)

    def _stopped(self, container_id: str) -> None:
        """After a successful StopContainer: runc removes the exited container's cgroup, and (unless
        `restart_on_stop` is off, a bare node) the kubelet starts it again with the spec's values."""
        pod, name = self._find(container_id)
        info = self.pods[pod]
        self.tree.remove(f"cpu/{info.pod_dir}/{container_id}")
        self.tree.remove(f"memory/{info.pod_dir}/{container_id}")
        self._record(Event("stop", f"{pod}/{name}"), pod)
        if self.restart_on_stop:
            view = self.view(pod)
            c = next(c for c in view.containers if c.name == name)
            values = compute_container(view, c, self.settings.compute_config(())).values
            self._start_container(pod, name, info.attempts[name] + 1, values)

    def mismatches(self, pod: str) -> list[str]:
        """The pod's files that differ from what the kubelet would write for its current spec."""
        return kubelet_mismatches(self, pod)

    # ---- the invariant, on the tree as it is now ----

    def check(self, pods: Iterable[str] | None = None) -> list[str]:
        """Breaches of the invariant on every pod (or on `pods`), as the tree is now."""
        return violations(self, pods)

    def close(self) -> None:
        self.client.close()


class _Runtime:
    """The CRI client, with the kubelet's and runc's side of a StopContainer played after it returns."""

    def __init__(self, client: CRIClient, stopped: Callable[[str], None]) -> None:
        self.client = client
        self.stopped = stopped

    def update_container_resources(self, container_id: ContainerID, values: ContainerValues) -> None:
        self.client.update_container_resources(container_id, values)

    def stop_container(self, container_id: ContainerID, timeout_s: int) -> None:
        self.client.stop_container(container_id, timeout_s)
        self.stopped(container_id)


@contextmanager
def node_on_kernel(workdir: Path, notes: list[str]) -> Iterator[ResizeNode]:
    """A node on this host's real cgroup v1 files below a fresh private root, its fake CRI server in
    `workdir`; everything removed after (a cgroup that cannot be is added to `notes`). The root is
    `node.tree.kernel`, the server `node.cri`."""
    root = KernelRoot.create()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with running_fake_cri(workdir) as cri:
            tree = KernelTree(root)
            node = ResizeNode(tree, cri, workdir / "harness-state", cgroup_root=tree.cgroup_root)
            try:
                yield node
            finally:
                node.close()
    finally:
        left = root.cleanup()
        if left:
            notes.append(f"could not remove {left}")
