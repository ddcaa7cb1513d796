"""A resize through CRI on the guest's real containerd + runc with the systemd cgroup driver (cgroup v2).

The module starts the guest's containerd with its own config, root, state and socket under a temp dir
(SystemdCgroup = true, an offline busybox image from tests/e2e/build_image.py, host-network pods with an
empty hostname as in tests/e2e), runs one pod in a kubelet-style transient pod slice, and resizes its
container with `apply --cri-endpoint --cgroup-driver systemd`: the runtime updates the container's scope
(cri-containerd-<id>.scope), the agent the pod slice over D-Bus; both are read back from the kernel.
Everything is torn down by PID (containerd, leftover shims) and through CRI.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent.commands.main import main
from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from cgroupfs.convert import shares_to_weight_linear, shares_to_weight_quadratic
from cgroupfs.naming import to_systemd
from cgroupfs.types import CgroupName
from tests.backends.systemd_trees import SYSTEMD_BACKENDS, SystemdBackend
from tests.v2guest import guestlib

pytestmark = pytest.mark.v2guest

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/kcg-v2-busybox:1"  # fully qualified: nothing is ever pulled
GUEST = [p for p in SYSTEMD_BACKENDS if p.id == "systemd-v2"]
SLOW_CALL = 120.0  # seconds: TCG is slow, and the first container start pays for it
MI = 1 << 20


def _runc_weight_formula() -> str:
    """runc converts container CPU shares to cpu.weight linearly before 1.3.2, quadratically since."""
    first = guestlib.run(["runc", "--version"]).stdout.splitlines()[0]  # "runc version 1.1.5+ds1"
    digits = first.split()[2].split("+")[0].split("-")[0]
    version = tuple(int(x) for x in digits.split(".")[:3])
    return "quadratic" if version >= (1, 3, 2) else "linear"


@dataclass
class Containerd:
    directory: Path
    proc: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"


def _config(d: Path) -> str:
    """tests/e2e's config with the systemd cgroup driver and the native snapshotter (no overlay module)."""
    text = (REPO / "tests/e2e/containerd.toml.in").read_text()
    text = text.replace("@D@", str(d)).replace("@SNAP@", "native").replace("@IMAGE@", IMAGE)
    assert "SystemdCgroup = false" in text
    return text.replace("SystemdCgroup = false", "SystemdCgroup = true")


def _shims(socket: Path) -> list[int]:
    """PIDs of containerd shims serving this containerd (their command line names its socket)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-address" in argv and str(socket).encode() in argv:
            out.append(int(proc.name))
    return out


def _cri_cleanup(endpoint: str) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        rt = pb_grpc.RuntimeServiceStub(channel)
        for c in rt.ListContainers(pb.ListContainersRequest(), timeout=SLOW_CALL).containers:
            rt.StopContainer(pb.StopContainerRequest(container_id=c.id, timeout=0), timeout=SLOW_CALL)
            rt.RemoveContainer(pb.RemoveContainerRequest(container_id=c.id), timeout=SLOW_CALL)
        for s in rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=SLOW_CALL).items:
            rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=s.id), timeout=SLOW_CALL)
            rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=s.id), timeout=SLOW_CALL)


@pytest.fixture(scope="module")
def containerd() -> Iterator[Containerd]:
    from tests.e2e.build_image import build

    d = Path(tempfile.mkdtemp(prefix="kcg-v2cri.", dir="/tmp"))
    for sub in ("root", "state", "opt", "runc", "cni/bin", "cni/net.d", "logs"):
        (d / sub).mkdir(parents=True)
    build(d / "image.tar", IMAGE)
    (d / "config.toml").write_text(_config(d))
    log = (d / "containerd.log").open("wb")
    proc = subprocess.Popen(["containerd", "--config", str(d / "config.toml")], stdout=log, stderr=log)
    log.close()
    running = Containerd(d, proc)
    try:
        ready = guestlib.wait_for(
            lambda: (
                proc.poll() is None
                and guestlib.run(["ctr", "-a", str(running.socket), "version"], check=False).returncode == 0
            ),
            timeout=60,
            interval=0.2,
        )
        assert ready, (d / "containerd.log").read_text()[-3000:]
        guestlib.run(
            [
                "ctr",
                "-a",
                str(running.socket),
                "-n",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
                str(d / "image.tar"),
            ]
        )
        yield running
    finally:
        _stop(running)


def _stop(c: Containerd) -> None:
    """CRI cleanup, containerd by its PID, leftover shims by PID, mounts under the dir, the dir."""
    try:
        if c.proc.poll() is None:
            _cri_cleanup(c.endpoint)
    finally:
        shims = _shims(c.socket)
        if c.proc.poll() is None:
            c.proc.send_signal(signal.SIGTERM)
            try:
                c.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait(timeout=30)
        for pid in shims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(f"{c.directory}/")), reverse=True):
            subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(c.directory, ignore_errors=True)


@dataclass
class RunningPod:
    uid: str
    name: str
    sandbox_id: str
    container_id: str
    slice: CgroupName  # below the backend's cgroup root


@pytest.fixture
def running_pod(containerd: Containerd, systemd_backend: SystemdBackend) -> Iterator[RunningPod]:
    """One burstable pod with one container, in a kubelet-made pod slice; removed through CRI before the
    slices are stopped."""
    b = systemd_backend
    uid = str(uuid.uuid4())
    for tier in (("kubepods",), ("kubepods", "burstable"), ("kubepods", "besteffort")):
        b.start_slice(CgroupName(tier), [("MemoryAccounting", "b", True)])
    pod_name = CgroupName(("kubepods", "burstable", f"pod{uid}"))
    # the kubelet starts the pod slice with the pod's values before RunPodSandbox
    b.start_slice(
        pod_name, [("MemoryAccounting", "b", True), ("CPUWeight", "t", 4), ("MemoryMax", "t", 128 * MI)]
    )
    labels = {
        "io.kubernetes.pod.uid": uid,
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "v2",
    }
    logs = containerd.directory / "logs" / uid
    logs.mkdir()
    config = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name="web", uid=uid, namespace="v2", attempt=0),
        hostname="",  # network=NODE: no private UTS namespace to set it in
        log_directory=str(logs),
        labels=labels,
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=b.unit(pod_name),  # the systemd driver passes the slice's unit name
            security_context=pb.LinuxSandboxSecurityContext(
                namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
            ),
        ),
    )
    with grpc.insecure_channel(containerd.endpoint) as channel:
        rt = pb_grpc.RuntimeServiceStub(channel)
        sandbox = rt.RunPodSandbox(pb.RunPodSandboxRequest(config=config), timeout=SLOW_CALL).pod_sandbox_id
        try:
            cconfig = pb.ContainerConfig(
                metadata=pb.ContainerMetadata(name="app", attempt=0),
                image=pb.ImageSpec(image=IMAGE),
                command=["/bin/sleep", "1000000"],
                log_path="app.log",
                labels={**labels, "io.kubernetes.container.name": "app"},
                linux=pb.LinuxContainerConfig(
                    resources=pb.LinuxContainerResources(
                        cpu_period=100_000, cpu_quota=50_000, cpu_shares=102, memory_limit_in_bytes=64 * MI
                    )
                ),
            )
            cid = rt.CreateContainer(
                pb.CreateContainerRequest(pod_sandbox_id=sandbox, config=cconfig, sandbox_config=config),
                timeout=SLOW_CALL,
            ).container_id
            rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=SLOW_CALL)
            yield RunningPod(uid, "web", sandbox, cid, pod_name)
        finally:
            _cri_cleanup(containerd.endpoint)


def _manifest(p: RunningPod, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": p.name, "namespace": "v2", "uid": p.uid},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "32Mi"},
                        "limits": {"cpu": cpu, "memory": memory},
                    },
                }
            ]
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": [
                {"name": "app", "containerID": f"containerd://{p.container_id}", "state": {"running": {}}}
            ],
        },
    }


@pytest.mark.parametrize("systemd_backend", GUEST, indirect=True)
def test_resize_through_cri_lands_in_the_scope_and_the_pod_slice(
    containerd: Containerd,
    systemd_backend: SystemdBackend,
    running_pod: RunningPod,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = systemd_backend
    pod_dir = b.cgroupfs / to_systemd(
        CgroupName((b.cgroup_root.removesuffix(".slice"), *running_pod.slice.parts))
    )
    scope = pod_dir / f"cri-containerd-{running_pod.container_id}.scope"
    assert scope.is_dir(), sorted(p.name for p in pod_dir.iterdir())
    assert guestlib.read_text(scope / "cpu.max") == "50000 100000"  # as created
    assert guestlib.read_text(scope / "memory.max") == str(64 * MI)

    pods_file = tmp_path / "pods.json"
    pods_file.write_text(json.dumps({"kind": "List", "items": [_manifest(running_pod, "700m", "192Mi")]}))
    config = tmp_path / "agent.yaml"  # container cpu.weight as the guest's runc converts shares
    config.write_text(f"containerCpuWeightFormula: {_runc_weight_formula()}\n")
    argv = [
        "apply",
        "--config",
        str(config),
        "--pods",
        str(pods_file),
        "--cgroup-root",
        b.cgroup_root,
        "--cgroup-driver",
        "systemd",
        "--cri-endpoint",
        containerd.endpoint,
        "--hugepage-sizes",
        "",
        "-o",
        "json",
    ]
    capsys.readouterr()
    rc = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    kinds = {s["kind"] for s in out["steps"]}
    assert "container" in kinds, out["steps"]

    # the runtime (runc, systemd driver) updated the container's scope
    assert guestlib.read_text(scope / "cpu.max") == "70000 100000"
    assert guestlib.read_text(scope / "memory.max") == str(192 * MI)
    weight = (
        shares_to_weight_linear(102)
        if _runc_weight_formula() == "linear"
        else shares_to_weight_quadratic(102)
    )
    assert guestlib.read_text(scope / "cpu.weight") == str(weight)  # 100m requested: 102 shares
    # the agent set the pod slice's unit properties; systemd wrote them
    assert guestlib.read_text(pod_dir / "cpu.max") == "70000 100000"
    assert guestlib.read_text(pod_dir / "memory.max") == str(192 * MI)
    assert guestlib.read_text(pod_dir / "cpu.weight") == "4"  # 102 shares, linear
    assert b.unit_property(running_pod.slice, "CPUQuotaPerSecUSec") == 700_000
    assert b.unit_property(running_pod.slice, "MemoryMax") == 192 * MI
    # the container still runs, and a second apply has nothing left to do
    with grpc.insecure_channel(containerd.endpoint) as channel:
        status = pb_grpc.RuntimeServiceStub(channel).ContainerStatus(
            pb.ContainerStatusRequest(container_id=running_pod.container_id), timeout=SLOW_CALL
        )
    assert status.status.state == pb.CONTAINER_RUNNING
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["writes"] == 0, again["steps"]
