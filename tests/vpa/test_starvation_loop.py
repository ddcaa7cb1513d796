"""The CPU starvation loop (agent.daemon.vpa_react) on a fake v1 and v2 cgroup tree: it reads the CFS counters
and the CPU time of the containers a VPA acts on, raises a throttled one through the VPA source (the pod
decided again, the proposal raised), and reads nothing of pods no VPA acts on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.compute.pod import pod_cgroup_name
from agent.core.model import QOSClass, Resources
from agent.core.ownership import resolve
from agent.daemon.components import DaemonContext
from agent.daemon.vpa_react import StarvationLoop, cfs_reading
from agent.infra.metrics import Metrics
from agent.pipeline import Environment
from agent.pods.parse import parse_pod
from agent.vpa.model import VPA, Recommendation, UpdateMode
from agent.vpa.react import Kind, Reaction, Reading
from agent.vpa.reacting import Reactor
from agent.vpa.source import VPASource
from cgroupfs.files import CgroupFiles
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree

CID = "cd" * 32
UID = "0f0e0d0c-0000-4000-8000-000000000002"
OWNERS = {("shop", "ReplicaSet", "api-1"): ("Deployment", "api")}


def _raw() -> dict[str, Any]:
    return {
        "metadata": {"name": "api-1-x", "namespace": "shop", "uid": UID,
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "api-1", "controller": True}]},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                                                               "limits": {"cpu": "1", "memory": "128Mi"}}}]},
        "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{CID}", "state": {"running": {}}, "restartCount": 0}]},
    }


def _vpa(opted_in: bool = True) -> VPA:
    rec = Recommendation("app", Resources(500, 64 << 20), Resources(400, 32 << 20), Resources(600, 128 << 20))
    return VPA("shop", "api", "Deployment", "api", UpdateMode.IN_PLACE, opted_in=opted_in, recommendations=(rec,))


@pytest.mark.parametrize("mode", ["v1", "v2"])
@pytest.mark.parametrize("opted_in", [True, False])
def test_a_throttled_container_is_raised_through_the_source(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, mode: str, opted_in: bool
) -> None:
    tree = fake_cgroup_tree(mode)
    pod_name = pod_cgroup_name(CgroupName(()), QOSClass.BURSTABLE, UID)
    leaves = tree.create(f"{cgroup_dir(pod_name, tree.driver)}/{CID}")

    def write(usage_s: float, periods: int, throttled: int) -> None:
        files = ({"cpuacct.usage": str(int(usage_s * 1e9)), "cpu.stat": f"nr_periods {periods}\nnr_throttled {throttled}\n"}
                 if mode == "v1" else
                 {"cpu.stat": f"usage_usec {int(usage_s * 1e6)}\nnr_periods {periods}\nnr_throttled {throttled}\n"})
        for leaf in leaves:
            for name, text in files.items():
                if mode == "v2" or name.split(".")[0] in leaf.split("/")[0].split(","):
                    (tree.root / leaf / name).write_text(text)

    settings = Settings(cgroupfs=tree.root, state_dir=tmp_path / "state")
    files = CgroupFiles(tree.root, ["memory/kubepods"] if mode == "v1" else ["kubepods"])
    env = Environment(settings, tree.hierarchy, (), files)
    pod = parse_pod(_raw(), sources=())
    ctx = DaemonContext(settings, "n1", None, Metrics(), resolve({}, None, {}, False), env, None, pods=lambda: [pod])
    said: list[Reaction] = []
    source = VPASource((_vpa(opted_in),), OWNERS, now=lambda: 1_800_000_000.0, reactor=Reactor())
    source.reactor.on_reaction = lambda key, uid, r: said.append(r)
    loop = StarvationLoop(ctx, source, lambda: Resources(4000, 8 << 30))
    moved: list[str] = []
    for second in range(5):  # a CPU-bound container at its 1-core limit: every period throttled
        write(second * 1.0, second * 10, second * 10)
        moved += loop.tick(1000.0 + second)
    if not opted_in:
        assert moved == [] and said == [] and loop.states == {}  # nothing read for this pod
        return
    assert moved == [UID] and [(r.kind, r.floor, r.limit_before) for r in said] == [(Kind.CPU_RAISED, 1000, 1000)]
    c = parse_pod(_raw(), sources=(source,)).containers[0]
    assert (c.requests.cpu_milli, c.limits.cpu_milli) == (1000, 2000)


@pytest.mark.parametrize(
    ("stat", "cpuacct", "reading"),
    [
        ("nr_periods 10\nnr_throttled 4\nthrottled_time 5\n", "2000000000\n", Reading(1.0, 10, 4, 2_000_000_000)),
        ("usage_usec 1500\nuser_usec 1\nnr_periods 10\nnr_throttled 4\n", None, Reading(1.0, 10, 4, 1_500_000)),
        ("usage_usec 1500\n", None, None),  # no CFS counters: a kernel without CFS bandwidth
        (None, None, None),
    ],
)
def test_reading_the_cfs_counters(stat: str | None, cpuacct: str | None, reading: Reading | None) -> None:
    assert cfs_reading(stat.encode() if stat else None, cpuacct.encode() if cpuacct else None, 1.0) == reading
