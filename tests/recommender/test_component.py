"""The sampler beside the daemon, on a fake v1 and v2 cgroup tree: two ticks give a CPU rate, the working
set and an OOM kill reacted to at once; it never writes; its state is saved and read back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import Settings
from agent.core.compute.pod import pod_cgroup_name
from agent.core.model import QOSClass
from agent.core.ownership import resolve
from agent.daemon.components import DaemonContext
from agent.daemon.recommender import recommender_component
from agent.infra.metrics import Metrics
from agent.pipeline import Environment
from agent.pods.parse import parse_pod
from agent.recommender.config import RecommenderSettings
from agent.recommender.sampler import Target
from cgroupfs.files import CgroupFiles
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree

CID = "ab" * 32
UID = "0f0e0d0c-0000-4000-8000-000000000001"


def _pod() -> Any:
    return parse_pod({
        "metadata": {"name": "api", "namespace": "shop", "uid": UID},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                               "limits": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{CID}", "state": {"running": {}}, "restartCount": 0}]},
    })


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_two_ticks_give_rate_working_set_and_an_oom(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, mode: str
) -> None:
    tree = fake_cgroup_tree(mode)
    pod_name = pod_cgroup_name(CgroupName(()), QOSClass.BURSTABLE, UID)
    leaves = tree.create(f"{cgroup_dir(pod_name, tree.driver)}/{CID}")

    def write(values: dict[str, str]) -> None:
        for leaf in leaves:
            for name, text in values.items():
                if mode == "v2" or name.split(".")[0] in leaf.split("/")[0].split(","):
                    (tree.root / leaf / name).write_text(text)

    def counters(usage_s: float, periods: int, throttled: int, mem: int, kills: int) -> dict[str, str]:
        if mode == "v1":
            return {"cpuacct.usage": str(int(usage_s * 1e9)), "cpu.stat": f"nr_periods {periods}\nnr_throttled {throttled}\n",
                    "memory.usage_in_bytes": str(mem), "memory.stat": "total_inactive_file 1000000\n",
                    "memory.max_usage_in_bytes": str(mem + 5_000_000), "memory.oom_control": f"oom_kill {kills}\n"}
        return {"cpu.stat": f"usage_usec {int(usage_s * 1e6)}\nnr_periods {periods}\nnr_throttled {throttled}\n",
                "memory.current": str(mem), "memory.stat": "inactive_file 1000000\n",
                "memory.peak": str(mem + 5_000_000), "memory.events": f"oom_kill {kills}\n"}

    settings = Settings(cgroupfs=tree.root, state_dir=tmp_path / "state",
                        recommender=RecommenderSettings(enabled=True, cpu_starvation=True))
    files = CgroupFiles(tree.root, ["memory/kubepods"] if mode == "v1" else ["kubepods"])
    env = Environment(settings, tree.hierarchy, (), files)
    ctx = DaemonContext(settings, "n1", None, Metrics(), resolve({}, None, {}, False), env, None, pods=lambda: [_pod()])
    comp = recommender_component(ctx)
    assert comp is not None
    now = [1_764_000_000.0]
    comp.clock = lambda: now[0]  # type: ignore[attr-defined]
    oomed: list[Target] = []
    comp.on_oom.append(oomed.append)  # type: ignore[attr-defined]
    comp.sampler.oom_every = 1  # type: ignore[attr-defined]  # the kill seen at the next tick (the cadence: test_sampler_reads)
    told: list[tuple[str, str, int | None]] = []  # what the VPA actuator hears (agent.daemon.vpa)
    ctx.on_oom.append(lambda pod, container, memory: told.append((pod, container, memory)))

    write(counters(10.0, 100, 0, 301_000_000, 0))
    comp.tick()  # type: ignore[attr-defined]
    now[0] += 2.0
    write(counters(11.2, 120, 12, 401_000_000, 1))  # 1.2 s of CPU in 2 s; throttled 12 of 20 periods; a kill
    assert comp.tick() == 2  # type: ignore[attr-defined]  # a usage sample and an OOM sample

    h = comp.state.histories[("shop/api", "app")]  # type: ignore[attr-defined]
    assert h.samples == 1 and h.ooms == 1
    # starvation on, 60 % of periods throttled (> 20 %): the CPU sample is taken at the 1-core limit
    assert h.cpu.percentile(1.0) >= 1.0
    # the kill counts as a memory sample at the larger of the peak file (406 MB) and the working set
    # (usage - inactive file = 400 MB); then VPA's rule: max(406 MB + 100 MiB, 1.2 × 406 MB) = 510,857,600
    assert h.memory_peak == 406_000_000
    assert h.oom_peak == 406_000_000 + 100 * 2**20
    assert [t.container for t in oomed] == ["app"]
    # the actuator hears it at once, with the bumped memory target: the OOM sample (510,857,600) lands in
    # the histogram, the target is its 90th percentile plus the 15 % margin, so above the bumped value
    [(pod, container, memory)] = told
    assert (pod, container) == ("shop/api", "app")
    assert memory is not None and memory > 510_857_600
    assert comp.sampler.reader.writes == 0  # type: ignore[attr-defined]  # read-only
    comp.persist()  # type: ignore[attr-defined]
    assert (tmp_path / "state" / "recommender.json").exists()
    again = recommender_component(ctx)
    assert again is not None and ("shop/api", "app") in again.state.histories  # type: ignore[attr-defined]


def test_off_by_default(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    ctx = DaemonContext(settings, None, None, Metrics(), resolve({}, None, {}, False), None, None)
    assert recommender_component(ctx) is None
