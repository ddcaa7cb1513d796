"""A two-container pod that sets only pod-level resources, on a fake v1 or v2 cgroup tree: its pod cgroup and
its containers' cgroups, and `write` that lays one reading of their counters into the files the sampler
reads (as the kernel shows them: v1 counts an OOM kill only in the victim's own cgroup, v2 in every
ancestor's memory.events too). Shared by the sampler test and the trace replays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.core.compute.pod import pod_cgroup_name
from agent.core.model import QOSClass
from agent.pods.parse import parse_pod
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree

UID = "0f0e0d0c-0000-4000-8000-0000000000a2"
CIDS = {"app": "ab" * 32, "side": "cd" * 32}
MI = 2**20


def pod(pod_level: bool = True) -> Any:
    """shop/api: two containers, and pod-level requests and limits (Burstable) unless `pod_level` is off (then
    the same values on the app container)."""
    level = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    containers: list[dict[str, Any]] = [{"name": "app"}, {"name": "side"}]
    spec: dict[str, Any] = {"containers": containers}
    if pod_level:
        spec["resources"] = level
    else:
        containers[0]["resources"] = level
    return parse_pod({
        "metadata": {"name": "api", "namespace": "shop", "uid": UID},
        "spec": spec,
        "status": {"phase": "Running", "containerStatuses": [
            {"name": n, "containerID": f"containerd://{cid}", "state": {"running": {}}, "restartCount": 0}
            for n, cid in CIDS.items()]},
    })


@dataclass(frozen=True, slots=True)
class Reading:
    """One cgroup's counters: CPU seconds used, memory usage, inactive file pages, peak, OOM kills counted
    (on v1 the pod cgroup's own count stays 0: no process lives in it)."""

    cpu_s: float
    usage: int
    inactive: int = 0
    peak: int = 0
    oom_kill: int = 0


def files(mode: str, r: Reading) -> dict[str, str]:
    if mode == "v1":
        return {"cpuacct.usage": str(round(r.cpu_s * 1e9)), "cpu.stat": "nr_periods 0\nnr_throttled 0\n",
                "memory.usage_in_bytes": str(r.usage), "memory.stat": f"total_inactive_file {r.inactive}\n",
                "memory.max_usage_in_bytes": str(r.peak), "memory.oom_control": f"oom_kill {r.oom_kill}\n"}
    return {"cpu.stat": f"usage_usec {round(r.cpu_s * 1e6)}\nnr_periods 0\nnr_throttled 0\n",
            "memory.current": str(r.usage), "memory.stat": f"inactive_file {r.inactive}\n",
            "memory.peak": str(r.peak), "memory.events": f"oom_kill {r.oom_kill}\n"}


class PodCgroup:
    """The pod's cgroups in `tree`; `write({"": pod reading, "app": ..., "side": ...})`."""

    def __init__(self, tree: FakeCgroupTree, mode: str) -> None:
        self.tree, self.mode = tree, mode
        pod_dir = cgroup_dir(pod_cgroup_name(CgroupName(()), QOSClass.BURSTABLE, UID), tree.driver)
        self.leaves = {"": tree.create(pod_dir), **{n: tree.create(f"{pod_dir}/{cid}") for n, cid in CIDS.items()}}

    def write(self, readings: dict[str, Reading]) -> None:
        for name, reading in readings.items():
            for leaf in self.leaves[name]:
                controllers = leaf.split("/")[0].split(",")
                for file, text in files(self.mode, reading).items():
                    if self.mode == "v2" or file.split(".")[0] in controllers:
                        (self.tree.root / leaf / file).write_text(text)
