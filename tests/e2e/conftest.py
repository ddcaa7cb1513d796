"""e2e fixtures: a real containerd started by tests/e2e/run.sh (`make e2e`), pods, and kernel read-back.

Every test here is skipped unless CRI_E2E_ENDPOINT is set (run.sh sets it, with CRI_E2E_DIR,
CRI_E2E_CGROUP_ROOT and CRI_E2E_IMAGE). Pods are host-network pods with an EMPTY hostname (containerd
1.6 shares the host UTS namespace for network=NODE) whose cgroup_parent lives under the run's private
cgroup root, never under plain /kubepods. Cgroup files are read from the kernel through the v1 mount
points found in /proc/self/mountinfo (cpu and cpuacct are separate mounts on these machines).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import yaml

from agent.cri.client import CRIClient
from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc

SLOW_CALL = 60.0  # seconds: deadline for the harness's own lifecycle calls (RunPodSandbox pulls nothing)


def _skip_reason() -> str | None:
    if not os.environ.get("CRI_E2E_ENDPOINT"):
        return "CRI_E2E_ENDPOINT is not set: run `make e2e` (root, cgroup v1, starts a private containerd)"
    if os.geteuid() != 0:
        return "e2e tests need root"
    return None


@pytest.fixture(autouse=True)
def _e2e_only() -> None:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)


@dataclass(frozen=True)
class E2EEnv:
    endpoint: str
    directory: Path
    cgroup_root: str  # "/kcg-e2e-xxxx"
    image: str


@pytest.fixture(scope="session")
def e2e_env() -> E2EEnv:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    return E2EEnv(
        endpoint=os.environ["CRI_E2E_ENDPOINT"],
        directory=Path(os.environ.get("CRI_E2E_DIR", "/tmp")),
        cgroup_root="/" + os.environ.get("CRI_E2E_CGROUP_ROOT", "/kcg-e2e").strip("/"),
        image=os.environ.get("CRI_E2E_IMAGE", "docker.io/library/kcg-e2e-busybox:1"),
    )


@pytest.fixture(scope="session")
def runtime(e2e_env: E2EEnv) -> Iterator[pb_grpc.RuntimeServiceStub]:
    """The raw RuntimeService stub, for what the agent never does (create, start, exec, remove)."""
    channel = grpc.insecure_channel(e2e_env.endpoint)
    yield pb_grpc.RuntimeServiceStub(channel)
    channel.close()


@pytest.fixture
def client(e2e_env: E2EEnv) -> Iterator[CRIClient]:
    """The agent's CRIClient against the real containerd."""
    with CRIClient(e2e_env.endpoint) as c:
        yield c


# ---- kernel cgroup files ----


_NOT_CONTROLLERS = frozenset(
    {"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods"}
)


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> dict[str, tuple[str, str]]:
    """controller -> (mount point, hierarchy root) for every cgroup v1 hierarchy ("name=systemd" for
    named ones), plus "unified" for a cgroup2 mount, from mountinfo."""
    out: dict[str, tuple[str, str]] = {}
    for line in Path(mountinfo).read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(extra) < 3 or len(fields) < 5:
            continue
        if extra[0] == "cgroup2":
            out.setdefault("unified", (fields[4], fields[3]))
            continue
        if extra[0] != "cgroup":
            continue
        for option in extra[2].split(","):
            if option in _NOT_CONTROLLERS or ("=" in option and not option.startswith("name=")):
                continue
            out[option] = (fields[4], fields[3])
    return out


@dataclass(frozen=True)
class Kernel:
    """Reads cgroup v1 files of the real kernel, by controller and cgroup path ("/kcg-e2e-x/kubepods/...")."""

    mounts: Mapping[str, tuple[str, str]]

    def dir(self, controller: str, cgroup: str) -> Path:
        mount, root = self.mounts[controller]
        rel = cgroup if root == "/" else cgroup.removeprefix(root)
        return Path(mount) / rel.lstrip("/")

    def read(self, controller: str, cgroup: str, name: str) -> str:
        return (self.dir(controller, cgroup) / name).read_text().strip()

    def read_int(self, controller: str, cgroup: str, name: str) -> int:
        return int(self.read(controller, cgroup, name))

    def write(self, controller: str, cgroup: str, name: str, value: str) -> None:
        (self.dir(controller, cgroup) / name).write_text(value)

    def cpu(self, cgroup: str) -> tuple[int, int, int]:
        """(cfs_period_us, cfs_quota_us, shares)."""
        return (
            self.read_int("cpu", cgroup, "cpu.cfs_period_us"),
            self.read_int("cpu", cgroup, "cpu.cfs_quota_us"),
            self.read_int("cpu", cgroup, "cpu.shares"),
        )

    def memory_limit(self, cgroup: str) -> int:
        return self.read_int("memory", cgroup, "memory.limit_in_bytes")


@pytest.fixture(scope="session")
def kernel() -> Kernel:
    mounts = cgroup_mounts()
    if "cpu" not in mounts or "memory" not in mounts:
        pytest.skip("no cgroup v1 cpu and memory hierarchies on this host")
    return Kernel(mounts)


# ---- pods ----


def resources(
    period: int = 0, quota: int = 0, shares: int = 0, memory: int = 0
) -> pb.LinuxContainerResources:
    return pb.LinuxContainerResources(
        cpu_period=period, cpu_quota=quota, cpu_shares=shares, memory_limit_in_bytes=memory
    )


@dataclass
class Pod:
    uid: str
    name: str
    sandbox_id: str
    cgroup_parent: str  # "/kcg-e2e-x/kubepods/burstable/pod<uid>"
    config: pb.PodSandboxConfig
    containers: dict[str, str] = field(default_factory=dict)  # name -> container id

    def container_cgroup(self, name: str) -> str:
        return f"{self.cgroup_parent}/{self.containers[name]}"


class PodRunner:
    """Runs host-network pods with N containers and removes them (and their pod cgroups) afterwards."""

    def __init__(self, env: E2EEnv, runtime: pb_grpc.RuntimeServiceStub, kernel: Kernel) -> None:
        self.env = env
        self.runtime = runtime
        self.kernel = kernel
        self.pods: list[Pod] = []

    def run(
        self,
        containers: Mapping[str, pb.LinuxContainerResources],
        *,
        qos: str = "burstable",
        name: str = "pod",
        command: tuple[str, ...] = ("/bin/sleep", "1000000"),
        image: str | None = None,
        args: tuple[str, ...] = (),
        mounts: tuple[pb.Mount, ...] = (),
        uid: str | None = None,  # an API server's pod UID, when the pod exists there too
    ) -> Pod:
        uid = uid or str(uuid.uuid4())
        tier = "" if qos == "guaranteed" else f"/{qos}"
        parent = f"{self.env.cgroup_root}/kubepods{tier}/pod{uid}"
        labels = {
            "io.kubernetes.pod.uid": uid,
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": "e2e",
        }
        logs = self.env.directory / "logs" / uid
        logs.mkdir(parents=True, exist_ok=True)
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="e2e", attempt=0),
            hostname="",  # network=NODE: containerd 1.6 has no private UTS namespace to set it in
            log_directory=str(logs),
            labels=labels,
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
                ),
            ),
        )
        sandbox_id = self.runtime.RunPodSandbox(
            pb.RunPodSandboxRequest(config=config), timeout=SLOW_CALL
        ).pod_sandbox_id
        pod = Pod(uid=uid, name=name, sandbox_id=sandbox_id, cgroup_parent=parent, config=config)
        self.pods.append(pod)
        for cname, res in containers.items():
            cconfig = pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name=cname, attempt=0),
                image=pb.ImageSpec(image=image or self.env.image),
                command=list(command),
                args=list(args),
                mounts=list(mounts),
                log_path=f"{cname}.log",
                labels={**labels, "io.kubernetes.container.name": cname},
                linux=pb.LinuxContainerConfig(resources=res),
            )
            cid = self.runtime.CreateContainer(
                pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=cconfig, sandbox_config=config),
                timeout=SLOW_CALL,
            ).container_id
            pod.containers[cname] = cid
            self.runtime.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=SLOW_CALL)
        return pod

    def exec(self, pod: Pod, container: str, *cmd: str) -> pb.ExecSyncResponse:
        request = pb.ExecSyncRequest(container_id=pod.containers[container], cmd=list(cmd), timeout=30)
        return self.runtime.ExecSync(request, timeout=SLOW_CALL)

    def remove_all(self) -> list[str]:
        """Remove every pod run by this runner; return what could not be cleaned (for the assertion)."""
        problems: list[str] = []
        for pod in self.pods:
            for cid in pod.containers.values():
                for call, request in (
                    (self.runtime.StopContainer, pb.StopContainerRequest(container_id=cid, timeout=0)),
                    (self.runtime.RemoveContainer, pb.RemoveContainerRequest(container_id=cid)),
                ):
                    try:
                        call(request, timeout=SLOW_CALL)
                    except grpc.RpcError as err:
                        problems.append(f"{cid[:12]}: {err.code().name} {err.details()}")
            for call, request in (
                (self.runtime.StopPodSandbox, pb.StopPodSandboxRequest(pod_sandbox_id=pod.sandbox_id)),
                (self.runtime.RemovePodSandbox, pb.RemovePodSandboxRequest(pod_sandbox_id=pod.sandbox_id)),
            ):
                try:
                    call(request, timeout=SLOW_CALL)
                except grpc.RpcError as err:
                    problems.append(f"sandbox {pod.sandbox_id[:12]}: {err.code().name} {err.details()}")
            # RemovePodSandbox leaves the pod cgroup itself behind, in every hierarchy
            for pod_dir in {self.kernel.dir(c, pod.cgroup_parent) for c in self.kernel.mounts}:
                if pod_dir.is_dir():
                    try:
                        pod_dir.rmdir()
                    except OSError as err:
                        problems.append(f"rmdir {pod_dir}: {err.strerror}")
        self.pods.clear()
        return problems


@pytest.fixture
def pods(e2e_env: E2EEnv, runtime: pb_grpc.RuntimeServiceStub, kernel: Kernel) -> Iterator[PodRunner]:
    """Run pods with `pods.run({"app": resources(...)})`; they are removed when the test ends."""
    runner = PodRunner(e2e_env, runtime, kernel)
    yield runner
    problems = runner.remove_all()
    assert not problems, f"pod cleanup failed: {problems}"


def api_daemon_config(env: E2EEnv, tmp_path: Path, kubeconfig: str, node: str) -> Path:
    """`kube-cgroup-agent run`'s config for a node whose pods come from an API server and whose containers
    run in this run's containerd: written to tmp_path/config.yaml, its state and log beside it."""
    config = {
        "cgroupfs": "/sys/fs/cgroup",
        "cgroupRoot": env.cgroup_root,
        "criEndpoint": env.endpoint,
        "kubeconfig": kubeconfig,
        "nodeName": node,
        "hugepageSizes": [],
        "createQOSCgroups": True,
        "stateDir": str(tmp_path / "state"),
        "metricsBindAddress": "127.0.0.1:0",
        "healthBindAddress": "127.0.0.1:0",
        "logFormat": "json",
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
