"""The daemon (`kube-cgroup-agent run`) with the real containerd: a pod listed from a fake API server gets
its pod cgroup applied, and a resize published through the API changes the real container cgroups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.core.compute import ComputeConfig, compute_pod
from agent.pods.parse import parse_pod
from tests.daemon.harness import Daemon, wait_for
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, api_daemon_config, resources
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.node import NODE, node_object
from tests.support.fakeapi.server import FakeAPIServer

pytestmark = pytest.mark.e2e


def _api_pod(pod: Pod, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": "e2e", "uid": pod.uid},
        "spec": {
            "nodeName": NODE,
            "containers": [
                {
                    "name": "app",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "32Mi"},
                        "limits": {"cpu": cpu_limit, "memory": memory_limit},
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": [
                {
                    "name": "app",
                    "containerID": f"containerd://{pod.containers['app']}",
                    "state": {"running": {}},
                    "restartCount": 0,
                }
            ],
        },
    }


def _values(raw: dict[str, Any]) -> tuple[int, int]:
    comp = compute_pod(parse_pod(raw), ComputeConfig())
    (c,) = comp.containers
    return c.values.cpu_quota, c.values.memory_limit


def test_a_resize_through_the_api_changes_the_real_container_cgroups(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path
) -> None:
    pod = pods.run(
        {"app": resources(period=100000, quota=50000, shares=102, memory=128 << 20)},
        qos="burstable",
        name="web",
    )
    cluster = FakeCluster(node=node_object())
    api = FakeAPIServer(cluster)
    api.start()
    daemon: Daemon | None = None
    try:
        cluster.apply(_api_pod(pod, "500m", "128Mi"))
        (tmp_path / "kubeconfig").write_text(api.kubeconfig())
        config = api_daemon_config(e2e_env, tmp_path, str(tmp_path / "kubeconfig"), NODE)
        daemon = Daemon(config, tmp_path / "daemon.log").start()
        # the pod cgroup gets the kubelet's values (runc made it without any)
        try:
            wait_for(
                lambda: kernel.read("cpu", pod.cgroup_parent, "cpu.cfs_quota_us") == "50000", "the pod quota"
            )
        except AssertionError:
            print((tmp_path / "daemon.log").read_text()[-8000:])
            raise
        assert kernel.memory_limit(pod.cgroup_parent) == 128 << 20

        resized = _api_pod(pod, "1500m", "256Mi")
        cluster.apply(resized)
        quota, memory = _values(resized)
        cg = pod.container_cgroup("app")
        wait_for(
            lambda: kernel.cpu(cg)[1] == quota and kernel.memory_limit(cg) == memory, "the container resize"
        )
        assert kernel.read_int("cpu", pod.cgroup_parent, "cpu.cfs_quota_us") == 150000
        assert kernel.memory_limit(pod.cgroup_parent) == 256 << 20
        assert daemon.terminate() == 0
    finally:
        if daemon is not None:
            daemon.kill()
        api.stop()
