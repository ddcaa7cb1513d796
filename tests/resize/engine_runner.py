"""The agent's resize engine as a separate process, for the SIGKILL test: `python -m
tests.resize.engine_runner CONFIG.json`.

Before every side effect (a cgroup write, a CRI call) it prints `step N <what>` and waits for `go` on
stdin, so the test can check the tree between any two steps and kill it (SIGKILL, by PID) at an exact
point. It runs passes until every resize is Done (or a pass limit), then prints `done <statuses>`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from agent.config.values import parse_allocatable
from agent.core.model import ContainerID, ContainerValues
from agent.core.plan import CgroupStep
from agent.cri.client import CRIClient
from agent.pipeline import Environment, owned_roots
from agent.pipeline.execute import file_runner
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.state import Timing
from agent.resize.types import ResizeState
from cgroupfs.files import CgroupFiles
from cgroupfs.layout import Hierarchy


class Lockstep:
    def __init__(self) -> None:
        self.n = 0

    def gate(self, what: str) -> None:
        print(f"step {self.n} {what}", flush=True)
        self.n += 1
        if sys.stdin.readline().strip() != "go":
            sys.exit(3)


class GatedRuntime:
    def __init__(self, client: CRIClient, lock: Lockstep) -> None:
        self.client, self.lock = client, lock

    def update_container_resources(self, container_id: ContainerID, values: ContainerValues) -> None:
        self.lock.gate(f"update {container_id[:12]}")
        self.client.update_container_resources(container_id, values)

    def stop_container(self, container_id: ContainerID, timeout_s: int) -> None:
        self.lock.gate(f"stop {container_id[:12]}")
        self.client.stop_container(container_id, timeout_s)


def main(path: str) -> int:
    cfg: dict[str, Any] = json.loads(Path(path).read_text())
    settings = Settings(
        cgroupfs=Path(cfg["cgroupfs"]),
        cri_endpoint=cfg["endpoint"],
        allocatable=parse_allocatable(cfg["allocatable"]),
        hugepage_sizes=(),
        state_dir=Path(cfg["state_dir"]),
        cgroup_version="1",
        cgroup_root=cfg.get("cgroup_root", "/"),
    )
    hierarchy = Hierarchy(v1=cfg["v1"])
    files = CgroupFiles(settings.cgroupfs, owned_roots(settings, hierarchy))
    env = Environment(settings, hierarchy, (), files)
    lock = Lockstep()
    inner = file_runner(files)

    def gated(step: CgroupStep) -> int:
        lock.gate(f"write {step.path}={step.setting.value}")
        return inner(step)

    with CRIClient(settings.cri_endpoint or "") as client:
        timing = Timing(backoff_base_s=0.0, backoff_cap_s=0.0, deferred_retry_s=0.0)
        engine = ResizeEngine(settings, env, GatedRuntime(client, lock), cgroup=gated, timing=timing)
        pods = [parse_pod(raw) for raw in cfg["pods"]]
        for problem in engine.start(pods):
            print(f"warning {problem.message}", flush=True)
        for _ in range(8):
            engine.reconcile()
            if all(s.state is ResizeState.DONE for s in engine.statuses()):
                break
        print("done " + json.dumps([s.to_json() for s in engine.statuses()]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
