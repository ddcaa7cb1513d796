"""The resize engine against the real containerd: a Guaranteed three-container pod resized with a net
increase, a net decrease and no net change; the kernel's files of every container and of the pod end at
the kubelet's values, and the pod's limit is never below the sum of its containers' at any point the
agent controls (the kernel would refuse a CPU quota order that broke it: EINVAL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.config.settings import from_mapping
from agent.core.compute import ComputeConfig, compute_pod
from agent.cri.client import CRIClient
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.types import ResizeState
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, resources

pytestmark = pytest.mark.e2e


def _manifest(pod: Pod, cpu: dict[str, str], mem: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": pod.name, "namespace": "e2e", "uid": pod.uid},
        "spec": {
            "containers": [
                {"name": n, "resources": {"limits": {"cpu": cpu[n], "memory": mem[n]}}} for n in cpu
            ]
        },
        "status": {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{pod.containers[n]}", "state": {"running": {}}}
                for n in cpu
            ],
        },
    }


def _kernel_matches(kernel: Kernel, pod: Pod, raw: dict[str, Any]) -> None:
    comp = compute_pod(parse_pod(raw), ComputeConfig())
    for c in comp.containers:
        cg = pod.container_cgroup(c.container.name)
        assert kernel.cpu(cg) == (c.values.cpu_period, c.values.cpu_quota, c.values.cpu_shares)
        assert kernel.memory_limit(cg) == c.values.memory_limit
    assert kernel.read_int("cpu", pod.cgroup_parent, "cpu.cfs_quota_us") == comp.values.cpu_quota
    assert kernel.memory_limit(pod.cgroup_parent) == comp.values.memory_limit


START_CPU = {"c1": "500m", "c2": "500m", "c3": "500m"}
START_MEM = {"c1": "64Mi", "c2": "64Mi", "c3": "64Mi"}


@pytest.mark.parametrize(
    ("cpu", "mem"),
    [
        (
            {"c1": "1", "c2": "250m", "c3": "750m"},
            {"c1": "128Mi", "c2": "32Mi", "c3": "96Mi"},
        ),  # net increase
        (
            {"c1": "750m", "c2": "250m", "c3": "250m"},
            {"c1": "96Mi", "c2": "32Mi", "c3": "32Mi"},
        ),  # net decrease
        (
            {"c1": "750m", "c2": "250m", "c3": "500m"},
            {"c1": "96Mi", "c2": "32Mi", "c3": "64Mi"},
        ),  # no net change
    ],
    ids=["net-increase", "net-decrease", "no-net-change"],
)
def test_guaranteed_three_containers(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path, cpu: dict[str, str], mem: dict[str, str]
) -> None:
    pod = pods.run(
        {n: resources(period=100000, quota=50000, shares=512, memory=64 << 20) for n in START_CPU},
        qos="guaranteed",
    )
    settings = from_mapping(
        {
            "cgroupRoot": e2e_env.cgroup_root,
            "criEndpoint": e2e_env.endpoint,
            "hugepageSizes": [],
            "stateDir": str(tmp_path / "state"),
            "allocatable": {"cpu": "2", "memory": "1Gi"},
            "createQOSCgroups": True,
        }
    )
    env = pipeline.environment(settings)
    from agent.pipeline.apply import ensure_tiers

    ensure_tiers(env)
    with CRIClient(e2e_env.endpoint) as client:
        engine = ResizeEngine(settings, env, client)
        engine.start([parse_pod(_manifest(pod, START_CPU, START_MEM))])
        engine.reconcile()
        _kernel_matches(kernel, pod, _manifest(pod, START_CPU, START_MEM))

        target = _manifest(pod, cpu, mem)
        engine.update(parse_pod(target))
        for _ in range(4):
            report = engine.reconcile()
            assert all(o.ok for o in report.steps), [o.error for o in report.steps if not o.ok]
            status = engine.status(pod.uid)  # type: ignore[arg-type]
            if status is not None and status.state is ResizeState.DONE:
                break
        assert status is not None and status.state is ResizeState.DONE, status
        _kernel_matches(kernel, pod, target)
