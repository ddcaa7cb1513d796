"""SIGKILLs at random points of a 3-container resize against the real containerd and runc (issue: crash
safety, 20 kills): the engine runs as its own process in lockstep with the test (tests/resize/crash.py),
is killed by PID just before a random cgroup write or CRI call, and is started again. Between every two
steps the kernel's files are checked (each container within the pod, the containers' sum within the pod;
the kernel itself refuses a CPU quota order that breaks it); after each kill the state directory reads
back whole; at the end a run without a kill finishes every resize and the kernel holds the latest spec.
`KCG_E2E_KILLS` sets the number of kills (default 20)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.config.settings import from_mapping
from agent.cri.client import CRIClient
from agent.pipeline.apply import ensure_tiers
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.store import PodStore
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, resources
from tests.e2e.test_resize_engine_e2e import START_CPU, START_MEM, _kernel_matches, _manifest
from tests.resize.crash import run_engine

pytestmark = pytest.mark.e2e
KILLS = int(os.environ.get("KCG_E2E_KILLS", "20"))
UNLIMITED = 1 << 62


def _violations(kernel: Kernel, pod: Pod) -> list[str]:
    out = []
    period, quota, _ = kernel.cpu(pod.cgroup_parent)
    pod_cpu = quota / period if quota > 0 else float("inf")
    pod_mem = kernel.memory_limit(pod.cgroup_parent)
    cpu_sum = mem_sum = 0.0
    for name in pod.containers:
        cp, cq, _ = kernel.cpu(pod.container_cgroup(name))
        cm = kernel.memory_limit(pod.container_cgroup(name))
        c_cpu = cq / cp if cq > 0 else float("inf")
        if c_cpu > pod_cpu + 1e-9:
            out.append(f"{name}: cpu {c_cpu} above the pod's {pod_cpu}")
        if pod_mem < UNLIMITED and cm > pod_mem:
            out.append(f"{name}: memory {cm} above the pod's {pod_mem}")
        cpu_sum += c_cpu
        mem_sum += cm
    if cpu_sum > pod_cpu + 1e-9:
        out.append(f"containers' cpu {cpu_sum} above the pod's {pod_cpu}")
    if pod_mem < UNLIMITED and mem_sum > pod_mem:
        out.append(f"containers' memory {mem_sum} above the pod's {pod_mem}")
    return out


def test_sigkills_during_resizes_with_the_real_runtime(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path
) -> None:
    pod = pods.run({n: resources(period=100000, quota=50000, shares=512, memory=64 << 20) for n in START_CPU}, qos="guaranteed")
    mapping = {
        "cgroupRoot": e2e_env.cgroup_root,
        "criEndpoint": e2e_env.endpoint,
        "hugepageSizes": [],
        "stateDir": str(tmp_path / "state"),
        "allocatable": {"cpu": "2", "memory": "1Gi"},
        "createQOSCgroups": True,
    }
    settings = from_mapping(mapping)
    env = pipeline.environment(settings)
    ensure_tiers(env)
    with CRIClient(e2e_env.endpoint) as client:  # the node as the kubelet left it, records written
        engine = ResizeEngine(settings, env, client)
        engine.start([parse_pod(_manifest(pod, START_CPU, START_MEM))])
        engine.reconcile()
    rng = random.Random(20)
    violations: list[str] = []
    cfg: dict[str, Any] = {
        "cgroupfs": str(settings.cgroupfs),
        "endpoint": e2e_env.endpoint,
        "allocatable": "cpu=2,memory=1Gi",
        "state_dir": str(settings.state_dir),
        "cgroup_root": e2e_env.cgroup_root,
        "v1": {c: env.hierarchy.v1[c] for c in ("cpu", "memory")},
    }
    kills = corrupt = 0
    target = _manifest(pod, START_CPU, START_MEM)
    while kills < KILLS:
        cpu = {n: rng.choice(["250m", "400m", "500m", "600m"]) for n in START_CPU}
        mem = {n: rng.choice(["32Mi", "64Mi", "96Mi", "128Mi"]) for n in START_CPU}
        target = _manifest(pod, cpu, mem)
        if run_engine({**cfg, "pods": [target]}, tmp_path, rng.randint(0, 8), lambda: violations.extend(_violations(kernel, pod))) is None:
            kills += 1
        corrupt += len(PodStore(settings.state_dir).load(persist=False).damaged)
    statuses = run_engine({**cfg, "pods": [target]}, tmp_path, None, lambda: violations.extend(_violations(kernel, pod)))
    assert statuses is not None and [s["state"] for s in statuses] == ["Done"]
    assert violations == [] and corrupt == 0
    _kernel_matches(kernel, pod, target)  # the latest spec: no resize lost
