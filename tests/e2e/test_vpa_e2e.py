"""VPA in place on a bare node with the real containerd: the VPA source and the agent's own resize engine
(no kubelet here). A Burstable pod owned (through its ReplicaSet) by a Deployment whose VPA opts in; a
recommendation outside the bounds is applied in place — requests and proportional limits in the kernel's
files of the running container, the same container (no restart), the pod cgroup above it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.config.settings import from_mapping
from agent.core.compute import ComputeConfig, compute_pod
from agent.core.model import Resources
from agent.cri.client import CRIClient
from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from agent.pipeline.apply import ensure_tiers
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.types import ResizeState
from agent.vpa.model import VPA, Recommendation, UpdateMode
from agent.vpa.source import VPASource
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, resources

pytestmark = pytest.mark.e2e
MI = 1 << 20


def _raw(pod: Pod) -> dict[str, Any]:
    return {
        "metadata": {
            "name": pod.name, "namespace": "e2e", "uid": pod.uid,
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-6d4f", "controller": True}],
        },
        "spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{pod.containers['app']}", "state": {"running": {}}}]},
    }


def test_a_recommendation_is_applied_in_place_by_the_agents_engine(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, runtime: pb_grpc.RuntimeServiceStub, tmp_path: Path
) -> None:
    pod = pods.run({"app": resources(period=100000, quota=20000, shares=102, memory=128 << 20)}, qos="burstable")
    started = runtime.ContainerStatus(pb.ContainerStatusRequest(container_id=pod.containers["app"])).status.started_at
    settings = from_mapping({
        "cgroupRoot": e2e_env.cgroup_root, "criEndpoint": e2e_env.endpoint, "hugepageSizes": [],
        "stateDir": str(tmp_path / "state"), "allocatable": {"cpu": "2", "memory": "1Gi"}, "createQOSCgroups": True,
    })
    env = pipeline.environment(settings)
    ensure_tiers(env)
    source = VPASource((), {("e2e", "ReplicaSet", "web-6d4f"): ("Deployment", "web")}, usage={})
    cg = pod.container_cgroup("app")
    with CRIClient(e2e_env.endpoint) as client:
        engine = ResizeEngine(settings, env, client)
        engine.start([parse_pod(_raw(pod), sources=(source,))])
        engine.reconcile()
        assert kernel.cpu(cg) == (100000, 20000, 102)

        rec = Recommendation("app", Resources(300, 96 * MI), Resources(200, 80 * MI), Resources(400, 160 * MI))
        source.vpas = (VPA("e2e", "web", "Deployment", "web", UpdateMode.IN_PLACE, opted_in=True, recommendations=(rec,)),)
        source.usage = {f"e2e/{pod.name}": {"app": kernel.read_int("memory", cg, "memory.usage_in_bytes")}}
        status = None
        for _ in range(4):  # the daemon's passes, each with the pod as the sources derive it
            view = parse_pod(_raw(pod), sources=(source,))
            engine.update(view)
            report = engine.reconcile()
            assert all(o.ok for o in report.steps), [o.error for o in report.steps if not o.ok]
            status = engine.status(pod.uid)  # type: ignore[arg-type]
            if status is not None and status.state is ResizeState.DONE:
                break
        assert status is not None and status.state is ResizeState.DONE, status
        # 100m -> 300m with the limit's ratio 2: 600m; 64Mi -> 96Mi, limit 128Mi -> 192Mi
        want = compute_pod(view, ComputeConfig()).containers[0].values
        assert (want.cpu_quota, want.memory_limit) == (60000, 192 * MI)
        assert kernel.cpu(cg) == (100000, 60000, 307)
        assert kernel.memory_limit(cg) == 192 * MI
        assert kernel.read_int("cpu", pod.cgroup_parent, "cpu.cfs_quota_us") >= 60000
    after = runtime.ContainerStatus(pb.ContainerStatusRequest(container_id=pod.containers["app"])).status
    assert after.state == pb.CONTAINER_RUNNING and after.started_at == started  # in place: never restarted
