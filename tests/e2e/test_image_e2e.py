"""The agent's own image (make image), imported into the private containerd and run through CRI as a node
would run it: `version`, and `check` against the host's cgroupfs mounted where the DaemonSet mounts it."""

from __future__ import annotations

import json
import os
import time
from importlib import metadata
from pathlib import Path

import pytest

from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from tests.e2e.conftest import SLOW_CALL, E2EEnv, Pod, PodRunner

pytestmark = pytest.mark.e2e


@pytest.fixture
def agent_image() -> str:
    image = os.environ.get("KCG_AGENT_IMAGE", "")
    if not image:
        pytest.skip("no agent image imported: run through `make e2e`, which builds it with `make image`")
    return image


def _run_to_exit(pods: PodRunner, runtime: pb_grpc.RuntimeServiceStub, image: str, args: tuple[str, ...],
                 mounts: tuple[pb.Mount, ...] = (), command: tuple[str, ...] = ()) -> tuple[int, str, Pod]:
    pod = pods.run({"agent": pb.LinuxContainerResources()}, name="agent", command=command, image=image, args=args,
                   mounts=mounts)
    cid = pod.containers["agent"]
    deadline = time.monotonic() + 60  # a bound on the wait, not an assertion on speed
    while True:
        status = runtime.ContainerStatus(pb.ContainerStatusRequest(container_id=cid), timeout=SLOW_CALL).status
        if status.state == pb.CONTAINER_EXITED or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status.state == pb.CONTAINER_EXITED, f"the agent container did not exit: {status.state}"
    log = pods.env.directory / "logs" / pod.uid / "agent.log"
    # CRI log lines: "<timestamp> <stream> <P|F> <text>"
    text = "\n".join(line.split(" ", 3)[3] for line in log.read_text().splitlines() if line.count(" ") >= 3)
    return status.exit_code, text, pod


def test_the_image_prints_its_version(
    pods: PodRunner, runtime: pb_grpc.RuntimeServiceStub, agent_image: str
) -> None:
    code, out, _ = _run_to_exit(pods, runtime, agent_image, ("version",))
    version = metadata.version("kube-cgroup-agent")
    assert code == 0, out
    assert out.startswith(f"kube-cgroup-agent {version} (commit "), out
    assert "commit unknown" not in out and "Python 3.11" in out


def test_the_command_is_on_the_images_path(
    pods: PodRunner, runtime: pb_grpc.RuntimeServiceStub, agent_image: str
) -> None:
    # what `kubectl exec POD -- kube-cgroup-agent ...` runs: the command by name, found on the image's PATH,
    # with no help from the image's environment (PYTHONPATH) either
    script = "unset PYTHONPATH; command -v kube-cgroup-agent && exec kube-cgroup-agent version"
    code, out, _ = _run_to_exit(pods, runtime, agent_image, ("-c", script), command=("/bin/sh",))
    assert code == 0, out
    assert out.splitlines()[0] == "/usr/local/bin/kube-cgroup-agent", out
    assert f"kube-cgroup-agent {metadata.version('kube-cgroup-agent')} (commit " in out, out


def test_the_image_checks_the_hosts_cgroupfs_mounted_as_the_daemonset_does(
    pods: PodRunner, runtime: pb_grpc.RuntimeServiceStub, agent_image: str, e2e_env: E2EEnv
) -> None:
    mount = pb.Mount(container_path="/host/sys/fs/cgroup", host_path="/sys/fs/cgroup", readonly=True)
    args = ("check", "--cgroupfs", "/host/sys/fs/cgroup", "--cgroup-root", e2e_env.cgroup_root, "--output", "json")
    code, out, _ = _run_to_exit(pods, runtime, agent_image, args, (mount,))
    checks = {c["name"]: c for c in json.loads(out)}
    assert code in (0, 2), out
    # seen from inside the container, through the bind mount: this host's hybrid hierarchy
    assert checks["cgroup mode"]["verdict"] == "ok" and "hybrid" in checks["cgroup mode"]["detail"]
    for controller in ("cpu", "memory"):  # found as v1 mounts below --cgroupfs (paths relative to it)
        assert checks[f"controller {controller}"] == {
            "name": f"controller {controller}", "verdict": "ok", "detail": f"v1 at {controller}"
        }


def test_check_in_the_image_takes_the_kubelets_config_by_default_and_reports_a_conflict(
    pods: PodRunner, runtime: pb_grpc.RuntimeServiceStub, agent_image: str
) -> None:
    # a kubeadm-shaped KubeletConfiguration where the kubelet keeps it; --cgroup-driver disagrees with it
    kubelet = pb.Mount(
        container_path="/var/lib/kubelet/config.yaml",
        host_path=str(Path(__file__).resolve().parents[1] / "ship" / "kubelet-config.yaml"),
        readonly=True,
    )
    cgroupfs = pb.Mount(container_path="/host/sys/fs/cgroup", host_path="/sys/fs/cgroup", readonly=True)
    args = ("check", "--cgroupfs", "/host/sys/fs/cgroup", "--cgroup-driver", "cgroupfs", "--output", "json")
    code, out, _ = _run_to_exit(pods, runtime, agent_image, args, (kubelet, cgroupfs))
    assert code in (0, 2), out
    checks = json.loads(out)
    inherited = {c["name"].removeprefix("kubelet setting "): c for c in checks if c["name"].startswith("kubelet setting ")}
    # every kubelet key the file sets except the one given on the command line, read inside the container
    assert sorted(inherited) == sorted(
        ["cgroupRoot", "cgroupsPerQOS", "qosReserved", "kubeReserved", "systemReserved", "enforceNodeAllocatable",
         "cpuCFSQuota", "cpuCFSQuotaPeriod", "cpuManagerPolicy", "featureGates", "evictionHard"]
    ), out
    assert all(c["detail"] == "inherited from /var/lib/kubelet/config.yaml" for c in inherited.values())
    [conflict] = [c for c in checks if c["name"] == "kubelet setting"]
    assert conflict["verdict"] == "warn"
    assert conflict["detail"] == (
        "cgroupDriver: the agent's setting cgroupfs wins over the kubelet's systemd (/var/lib/kubelet/config.yaml)"
    )
