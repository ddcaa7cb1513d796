"""Figure 4 of BENCHMARKS.md: one resize through the agent against the bare UpdateContainerResources call
for the same change, on the real containerd of `make e2e`.

It measures only when KCG_BENCH_OUT names a file (`make bench` runs it through tests/e2e/run.sh with
PYTEST_ARGS selecting it) and is skipped otherwise, so `make e2e` stays fast. It checks that each resize
reached the kernel, never how long anything took.

Agent = the daemon's per-pod work item (`reconcile_pod` of the one reconciler, the resize engine, on a
bare node) with a long-lived CRI client and environment, as in
the daemon: compute, read the pod's cgroup files, diff, plan, write the pod cgroup, call the runtime.
Bare = the raw gRPC UpdateContainerResources with the container values the agent computes for the target.
The bare calls go to a twin pod started with the same values whose pod cgroup the agent never touches
(no quota, as runc makes it): a bare call does not grow the pod cgroup, and a container quota may not
exceed its pod's; changing the agent's pod cgroup behind its back would look like drift to it.
"""

from __future__ import annotations

import cProfile
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.config.settings import Settings, from_mapping
from agent.core.compute import ComputeConfig, compute_pod
from agent.core.model import ContainerID, ContainerValues, PodView
from agent.cri.client import CRIClient
from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from agent.daemon.engine_reconciler import EngineReconciler
from agent.daemon.reconciler import Outcome, Reconciler
from agent.pipeline.apply import ensure_tiers
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, resources
from tests.e2e.test_apply_e2e import _manifest, _start, g

pytestmark = pytest.mark.e2e

SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cpu": (g("500m", "128Mi"), g("1", "128Mi")),
    "cpu+memory": (g("500m", "128Mi"), g("1", "256Mi")),
}
NEVER: Callable[[], bool] = lambda: False  # noqa: E731 - the reconcilers' stop callback


@pytest.fixture
def bench_out() -> Path:
    out = os.environ.get("KCG_BENCH_OUT")
    if not out:
        pytest.skip("KCG_BENCH_OUT is not set: this module measures for `make bench` only")
    return Path(out)


@dataclass
class CountingCRI:
    """The agent's CRI client, counting the runtime calls one resize makes and the time spent in them."""

    client: CRIClient
    updates: int = 0
    seconds: float = 0.0

    def update_container_resources(self, container_id: ContainerID, values: ContainerValues) -> None:
        self.updates += 1
        t0 = time.perf_counter()
        try:
            self.client.update_container_resources(container_id, values)
        finally:
            self.seconds += time.perf_counter() - t0

    def stop_container(self, container_id: ContainerID, timeout_s: int) -> None:
        self.client.stop_container(container_id, timeout_s)


@pytest.fixture
def cri(e2e_env: E2EEnv) -> Iterator[CountingCRI]:
    with CRIClient(e2e_env.endpoint) as client:
        yield CountingCRI(client)


def _settings(env: E2EEnv, state: Path) -> Settings:
    return from_mapping(
        {
            "cgroupfs": "/sys/fs/cgroup",
            "cgroupRoot": env.cgroup_root,
            "criEndpoint": env.endpoint,
            "hugepageSizes": [],
            "createQOSCgroups": True,
            "stateDir": str(state),
        }
    )


def _bare_request(pod: Pod, spec: dict[str, Any]) -> pb.UpdateContainerResourcesRequest:
    v = compute_pod(parse_pod(_manifest(pod, {"c": spec})), ComputeConfig()).containers[0].values
    linux = resources(v.cpu_period, v.cpu_quota, v.cpu_shares, max(v.memory_limit, 0))
    return pb.UpdateContainerResourcesRequest(container_id=pod.containers["c"], linux=linux)


def _measure(
    kind: str,
    scenario: tuple[dict[str, Any], dict[str, Any]],
    settings: Settings,
    pods: PodRunner,
    runtime: pb_grpc.RuntimeServiceStub,
    kernel: Kernel,
    cri: CountingCRI,
    rounds: int,
) -> dict[str, list[float]]:
    a, b = scenario
    pod = _start(pods, {"c": a}, "guaranteed")
    twin = _start(pods, {"c": a}, "guaranteed")
    view: dict[str, PodView] = {
        "a": parse_pod(_manifest(pod, {"c": a})),
        "b": parse_pod(_manifest(pod, {"c": b})),
    }
    env = pipeline.environment(settings)
    ensure_tiers(env)
    rec: Reconciler = EngineReconciler(ResizeEngine(settings, env, cri))
    rec.start([view["a"]])
    rec.reconcile_tiers([view["a"]], NEVER)
    rec.reconcile_pod(view["a"], NEVER)
    out: dict[str, list[float]] = {"agent_s": [], "in_cri_s": [], "bare_s": [], "cri_calls": [], "writes": []}
    quota = "cpu.cfs_quota_us"
    bare = [_bare_request(twin, b), _bare_request(twin, a)]
    profile = cProfile.Profile() if os.environ.get("KCG_BENCH_PROFILE") else None
    for _ in range(rounds):
        for target in ("b", "a"):
            cri.updates, cri.seconds = 0, 0.0
            if profile is not None:
                profile.enable()
            t0 = time.perf_counter()
            report = rec.reconcile_pod(view[target], NEVER)
            out["agent_s"].append(time.perf_counter() - t0)
            if profile is not None:
                profile.disable()
            assert report.outcome is Outcome.APPLIED, report
            want = compute_pod(view[target], ComputeConfig()).containers[0].values.cpu_quota
            assert kernel.read_int("cpu", pod.container_cgroup("c"), quota) == want
            out["cri_calls"].append(cri.updates)
            out["in_cri_s"].append(cri.seconds)
            out["writes"].append(report.writes)
        for request in bare:
            t0 = time.perf_counter()
            runtime.UpdateContainerResources(request, timeout=30)
            out["bare_s"].append(time.perf_counter() - t0)
            want = request.linux.cpu_quota
            assert kernel.read_int("cpu", twin.container_cgroup("c"), quota) == want
    if profile is not None:  # where the agent's own time goes (figure 4 names it)
        profile.dump_stats(f"{os.environ['KCG_BENCH_PROFILE']}.{kind}.{b['limits']['memory']}.prof")
    return out


def test_bench_resize_through_the_agent_vs_bare_cri(
    bench_out: Path,
    e2e_env: E2EEnv,
    pods: PodRunner,
    runtime: pb_grpc.RuntimeServiceStub,
    kernel: Kernel,
    cri: CountingCRI,
    tmp_path: Path,
) -> None:
    rounds = int(os.environ.get("KCG_BENCH_ROUNDS", "15"))
    results: dict[str, Any] = {"rounds": rounds, "scenarios": {}}
    for name, scenario in SCENARIOS.items():
        for kind in ("engine",):
            settings = _settings(e2e_env, tmp_path / f"state-{name}-{kind}")
            got = _measure(kind, scenario, settings, pods, runtime, kernel, cri, rounds)
            results["scenarios"].setdefault(name, {})[kind] = got
    bench_out.write_text(json.dumps(results, indent=1) + "\n")
