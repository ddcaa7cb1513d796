"""The QoS tiers move in the same reconcile as a resize, against the real containerd (`make e2e`).

A Guaranteed pod runs in containerd under the run's private cgroup root; the resize engine is set up with
qosReserved memory 100%, createQOSCgroups and 1Gi allocatable memory, so the Burstable and BestEffort
tiers' memory limits are allocatable - the Guaranteed pod's memory request. The pod's memory is resized
up through the engine: in the very reconcile that reports the resize Done, the kernel already shows both
tiers at 1Gi - 128Mi (not after the kubelet's minute), and the journal of the agent's writes and runtime
calls shows the tiers lowered (BestEffort, then Burstable) before the pod cgroup and the container grew.
Resized back down: in that same kind of single reconcile the container and pod shrink first, then the
tiers grow back (Burstable, then BestEffort) to 1Gi - 64Mi.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.config.settings import from_mapping
from agent.core.model import ContainerID, ContainerValues
from agent.core.plan import CgroupStep
from agent.cri.client import CRIClient
from agent.pipeline.apply import ensure_tiers
from agent.pipeline.execute import CgroupStepRunner, file_runner
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.report import PassReport
from agent.resize.types import ResizeState
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, resources

pytestmark = pytest.mark.e2e

MI = 1 << 20
GI = 1 << 30
MEMORY_LIMIT = "memory.limit_in_bytes"


def _manifest(pod: Pod, memory: str) -> dict[str, Any]:
    return {
        "metadata": {"name": pod.name, "namespace": "e2e", "uid": pod.uid},
        "spec": {"containers": [{"name": "app", "resources": {"limits": {"cpu": "250m", "memory": memory}}}]},
        "status": {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {
                    "name": "app",
                    "containerID": f"containerd://{pod.containers['app']}",
                    "state": {"running": {}},
                }
            ],
        },
    }


class RecordingRuntime:
    """The agent's CRI client, journaling each UpdateContainerResources once containerd answered it."""

    def __init__(self, client: CRIClient, journal: list[tuple[str, str, str]]) -> None:
        self.client = client
        self.journal = journal

    def update_container_resources(self, container_id: ContainerID, values: ContainerValues) -> None:
        self.client.update_container_resources(container_id, values)
        self.journal.append(("update", container_id, str(values.memory_limit)))

    def stop_container(self, container_id: ContainerID, timeout_s: int) -> None:
        self.client.stop_container(container_id, timeout_s)
        self.journal.append(("stop", container_id, ""))


def _recording(inner: CgroupStepRunner, journal: list[tuple[str, str, str]]) -> CgroupStepRunner:
    def run(step: CgroupStep) -> int:
        written = inner(step)
        journal.append(("write", step.path, step.setting.value))
        return written

    return run


def _index(journal: list[tuple[str, str, str]], kind: str, suffix: str) -> int:
    found = [i for i, (k, target, _) in enumerate(journal) if k == kind and target.endswith(suffix)]
    assert found, journal
    return found[0]


def _resize_until_done(engine: ResizeEngine, pod: Pod, raw: dict[str, Any]) -> tuple[int, PassReport]:
    """Queue the resize, then reconcile until a pass reports it Done; returns (passes taken, that pass)."""
    engine.update(parse_pod(raw))
    for rounds in range(1, 5):
        report = engine.reconcile()
        assert not report.errors, report.errors
        assert all(o.ok for o in report.steps), [o.error for o in report.steps if not o.ok]
        status = engine.status(pod.uid)  # type: ignore[arg-type]
        if status is not None and status.state is ResizeState.DONE:
            return rounds, report
    raise AssertionError(f"resize of {pod.name} not Done after 4 passes: {status}")


def test_a_resize_moves_the_qos_tiers_in_the_same_reconcile(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path
) -> None:
    pod = pods.run(
        {"app": resources(period=100000, quota=25000, shares=256, memory=64 * MI)},
        qos="guaranteed",
        name="tiers",
    )
    settings = from_mapping(
        {
            "cgroupRoot": e2e_env.cgroup_root,
            "criEndpoint": e2e_env.endpoint,
            "hugepageSizes": [],
            "stateDir": str(tmp_path / "state"),
            "allocatable": {"cpu": "2", "memory": "1Gi"},
            "qosReserved": {"memory": "100%"},
            "createQOSCgroups": True,
        }
    )
    env = pipeline.environment(settings)
    assert settings.create_qos_cgroups
    ensure_tiers(env)
    kubepods = f"{e2e_env.cgroup_root}/kubepods"
    burstable, besteffort = f"{kubepods}/burstable", f"{kubepods}/besteffort"
    container = pod.container_cgroup("app")
    journal: list[tuple[str, str, str]] = []
    try:
        with CRIClient(e2e_env.endpoint) as client:
            engine = ResizeEngine(
                settings,
                env,
                RecordingRuntime(client, journal),
                cgroup=_recording(file_runner(env.files), journal),
            )
            engine.start([parse_pod(_manifest(pod, "64Mi"))])
            first = engine.reconcile()
            assert not first.errors and all(o.ok for o in first.steps), first.plan().steps
            assert kernel.memory_limit(kubepods) == GI
            assert kernel.memory_limit(burstable) == GI - 64 * MI
            assert kernel.memory_limit(besteffort) == GI - 64 * MI
            assert kernel.memory_limit(pod.cgroup_parent) == kernel.memory_limit(container) == 64 * MI

            # up: the pass that reports Done has already lowered both tiers in the kernel
            journal.clear()
            rounds, report = _resize_until_done(engine, pod, _manifest(pod, "128Mi"))
            assert kernel.memory_limit(burstable) == GI - 128 * MI
            assert kernel.memory_limit(besteffort) == GI - 128 * MI
            assert kernel.memory_limit(pod.cgroup_parent) == kernel.memory_limit(container) == 128 * MI
            assert rounds == 1, journal  # one reconcile, not a later one
            assert report.shortfalls == []
            be = _index(journal, "write", f"besteffort/{MEMORY_LIMIT}")
            bu = _index(journal, "write", f"burstable/{MEMORY_LIMIT}")
            pod_mem = _index(journal, "write", f"pod{pod.uid}/{MEMORY_LIMIT}")
            ctr = _index(journal, "update", pod.containers["app"])
            assert be < bu < pod_mem < ctr, journal

            # down: the pass that reports Done has already raised both tiers again
            journal.clear()
            rounds, _ = _resize_until_done(engine, pod, _manifest(pod, "64Mi"))
            assert kernel.memory_limit(pod.cgroup_parent) == kernel.memory_limit(container) == 64 * MI
            assert kernel.memory_limit(burstable) == GI - 64 * MI
            assert kernel.memory_limit(besteffort) == GI - 64 * MI
            assert rounds == 1, journal
            ctr = _index(journal, "update", pod.containers["app"])
            pod_mem = _index(journal, "write", f"pod{pod.uid}/{MEMORY_LIMIT}")
            bu = _index(journal, "write", f"burstable/{MEMORY_LIMIT}")
            be = _index(journal, "write", f"besteffort/{MEMORY_LIMIT}")
            assert ctr < pod_mem < bu < be, journal

            assert engine.reconcile().writes == 0  # converged: nothing left for a later pass
    finally:
        # the tiers are shared by the run's other tests: leave them unlimited, as ensure_tiers made them
        for tier in (besteffort, burstable):
            kernel.write("memory", tier, MEMORY_LIMIT, "-1")
