"""The sampler on a fake v1 and v2 pod cgroup of a two-container pod that sets pod-level resources: the pod
is one more target, POD, whose samples are the pod cgroup's CPU rate and working set; a kill of one
container is an OOM sample of the pod (v2: the pod cgroup's hierarchical memory.events; v1: the container's
memory.oom_control, since v1 counts a kill only in the victim's cgroup); the VPA actuator's OOM hook hears
the container, never POD; a pod without pod-level resources has no POD target; the state keeps the pod's
history apart in its file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.config.settings import Settings
from agent.core.model import POD
from agent.core.ownership import resolve
from agent.daemon.components import DaemonContext
from agent.daemon.recommender import recommender_component
from agent.infra.metrics import Metrics
from agent.pipeline import Environment
from agent.recommender.config import RecommenderSettings
from agent.recommender.sampler import targets
from agent.recommender.state import RecommenderState
from agent.recommender.store import load, save
from cgroupfs.files import CgroupFiles
from cgroupfs.types import CgroupName
from tests.recommender.podcgroup import MI, PodCgroup, Reading, pod
from tests.support.cgroup_tree import FakeCgroupTree

T0 = 1_764_000_000.0


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_the_pod_cgroup_is_sampled_and_a_container_kill_is_an_oom_of_the_pod(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, mode: str
) -> None:
    tree = fake_cgroup_tree(mode)
    cg = PodCgroup(tree, mode)
    settings = Settings(cgroupfs=tree.root, state_dir=tmp_path / "state", recommender=RecommenderSettings(enabled=True))
    files = CgroupFiles(tree.root, ["cpuacct/kubepods", "memory/kubepods"] if mode == "v1" else ["kubepods"])
    ctx = DaemonContext(settings, "n1", None, Metrics(), resolve({}, None, {}, False),
                        Environment(settings, tree.hierarchy, (), files), None, pods=lambda: [pod()])
    comp = recommender_component(ctx)
    assert comp is not None
    now = [T0]
    comp.clock = lambda: now[0]  # type: ignore[attr-defined]
    comp.sampler.oom_every = 1  # type: ignore[attr-defined]
    told: list[tuple[str, str]] = []
    ctx.on_oom.append(lambda p, c, _m: told.append((p, c)))

    cg.write({"": Reading(10.0, 300 * MI, 20 * MI, 310 * MI), "app": Reading(7.0, 200 * MI, 10 * MI, 205 * MI),
              "side": Reading(3.0, 100 * MI, 10 * MI, 105 * MI)})
    comp.tick()  # type: ignore[attr-defined]
    now[0] += 2.0
    pod_kills = 1 if mode == "v2" else 0  # v1 counts the kill in the victim's cgroup only
    cg.write({"": Reading(11.5, 400 * MI, 20 * MI, 450 * MI, pod_kills), "app": Reading(8.2, 290 * MI, 10 * MI, 300 * MI, 1),
              "side": Reading(3.3, 110 * MI, 10 * MI, 115 * MI)})
    comp.tick()  # type: ignore[attr-defined]

    state: RecommenderState = comp.state  # type: ignore[attr-defined]
    h = state.histories[("shop/api", POD)]
    assert h.samples == 1 and h.cpu.percentile(1.0) >= 0.75  # 1.5 s of the pod's CPU in 2 s
    assert h.ooms == 1
    # the OOM sample: the larger of the pod cgroup's peak (450Mi) and working set (380Mi), then VPA's bump
    assert h.memory_peak == 450 * MI and h.oom_peak == 550 * MI
    assert state.histories[("shop/api", "app")].ooms == 1 and state.histories[("shop/api", "side")].ooms == 0
    assert told == [("shop/api", "app")]  # the actuator reacts to the container, not to POD
    assert state.containers_in("shop/api") == 2

    save(tmp_path / "r.json", state)
    again, warning = load(tmp_path / "r.json", state.settings)
    assert warning is None and again.to_dict() == state.to_dict()
    assert [i["pod"] for i in state.to_dict()["pods"]] == ["shop/api"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("mode", "pod_level", "names"), [
    ("v1", True, ["app", "side", POD]),
    ("v2", True, ["app", "side", POD]),
    ("v1", False, ["app", "side"]),
    ("v2", False, ["app", "side"]),
])
def test_a_pod_target_only_for_pods_that_set_pod_level_resources(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str, pod_level: bool, names: list[str]
) -> None:
    tree = fake_cgroup_tree(mode)
    out = targets([pod(pod_level)], CgroupName(()), tree.driver, tree.hierarchy)
    assert [t.container for t in out] == names
    if pod_level:
        files = dict(out[-1].files)
        assert ("memory.oom_control" in files) is False and ("memory.events" in files) == (mode == "v2")
        assert out[-1].cpu_limit_cores == 2.0 and out[-1].memory_request == 512 * MI
        prefix = {"v1": "{c}/kubepods/burstable", "v2": "kubepods/burstable"}[mode]
        for name, path in files.items():  # the pod cgroup's own files, each in its controller's hierarchy
            controller = "cpuacct" if name == "cpuacct.usage" else name.split(".")[0]
            assert path == f"{prefix.format(c=controller)}/pod{pod().uid}/{name}"


def test_an_old_state_file_without_pods_still_reads() -> None:
    s = RecommenderSettings()
    st = RecommenderState(s)
    from agent.recommender.trace import Sample

    st.observe(Sample(T0, "shop/api", "app", cpu=0.2, memory=1e8))
    old = st.to_dict()
    assert "pods" not in old  # what releases before pod-level histories wrote
    assert RecommenderState.from_dict(s, old).histories.keys() == {("shop/api", "app")}


@pytest.mark.parametrize(("line", "container"), [
    ('{"ts": 1, "pod": "shop/api", "cpu": 0.5, "memory": 1000}', POD),  # no container: the pod cgroup
    ('{"ts": 1, "pod": "shop/api", "container": "app", "cpu": 0.5}', "app"),
    ('{"ts": 1, "pod": "shop/api", "oom": true, "memory": 1000}', POD),
])
def test_a_trace_line_without_a_container_is_the_pod_cgroups(line: str, container: str) -> None:
    from agent.recommender.trace import parse_line

    sample = parse_line(line)
    assert sample.container == container and parse_line(sample.to_json()) == sample


def test_an_empty_container_name_is_refused() -> None:
    from agent.recommender.trace import parse_line

    with pytest.raises(ValueError, match="container must be a name"):
        parse_line('{"ts": 1, "pod": "shop/api", "container": "", "cpu": 0.5}')


def test_the_recommend_output_shows_the_pod_level() -> None:
    import json

    from agent.recommender import render
    from agent.recommender.trace import Sample

    st = RecommenderState(RecommenderSettings())
    for i in range(10):
        st.observe(Sample(T0 + 60 * i, "shop/api", "app", cpu=0.2, memory=1e8))
        st.observe(Sample(T0 + 60 * i, "shop/api", POD, cpu=0.3, memory=2e8))
    [entry] = json.loads(render.to_json(st.recommendations()))["pods"]
    assert [c["containerName"] for c in entry["containerRecommendations"]] == ["app"]
    assert set(entry["podRecommendations"]) == {"target", "lowerBound", "upperBound", "uncappedTarget", "confidence"}
    assert [row.split()[1] for row in render.to_table(st.recommendations()).splitlines()[1:]] == ["(pod)", "app"]
