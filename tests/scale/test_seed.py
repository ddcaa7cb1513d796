"""The recommender histories the scale harness seeds before its agents start (bench/scale/nodes.py
`seed_recommender`): written where the agent's config says, keyed exactly as the agent's sampler keys the
harness's pods, drawn from the usage thread's model, and loaded by the agent's own store as 8 days of
history for the pods of two of a node's three VPAs naming the recommender, none for the third's."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bench.scale import nodes, objects, scenario, usage

SHIPPED = {"cgroupfs": "/host/sys/fs/cgroup", "kubeletConfig": "/k", "stateDir": "/s", "resyncPeriod": "60s",
           "vpa": {"enabled": True}, "rollout": {"enabled": True}}
NOW = 1_800_000_000.0
DAYS_S = nodes.SEED_DAYS * nodes.DAY_S


def _running(p: dict[str, Any], n: int) -> dict[str, Any]:
    """A pod as the harness leaves it: created (a UID) and given the status a kubelet reports."""
    out = {**p, "metadata": {**p["metadata"], "uid": objects.uid("pod", p["metadata"]["namespace"], p["metadata"]["name"])}}
    out.update(objects.pod_status(out, "2026-01-01T00:00:00Z", objects.pod_ip(n)))
    return out


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One agent node as harness.setup makes it: its files, its converged tree with the sampler's counter
    files, then the recommender state seeded for its OWN_SEEDED VPAs' pods."""
    from agent import pipeline
    from agent.config.kubelet import inherit
    from agent.config.settings import load_file

    tmp = tmp_path_factory.mktemp("seed")
    node = nodes.SimNode("sim-000", 0, tmp / "sim-000", 6600, 9900, 9901)
    own = scenario.own(node.name, node.index)
    pods = [_running(p, n) for n, p in enumerate(own.pods)]
    nodes.write_files(node, SHIPPED)
    counters = nodes.converge_tree(node, objects.node(node.name, True), pods)
    keys = nodes.named_pods(own.vpa_objects(own.seeded), pods)
    chosen = [c for c in counters if c.pod in keys]
    out = nodes.seed_recommender(node, chosen, NOW, random.Random(41))
    settings = inherit(load_file(node.config))  # as the daemon reads its node: its hierarchy, root and driver
    return {"node": node, "own": own, "pods": pods, "counters": counters, "chosen": chosen, "written": out,
            "settings": settings, "hierarchy": pipeline.environment(settings).hierarchy}


def _targets(seeded: dict[str, Any], views: list[Any]) -> list[Any]:
    """The sampler's targets for these pods, as the daemon's recommender computes them each tick."""
    from agent.recommender.sampler import targets

    s = seeded["settings"]
    return targets(views, s.cgroup_root_name, s.cgroup_driver, seeded["hierarchy"])


def _state(seeded: dict[str, Any]) -> Any:
    """The state file as the daemon loads it at its start (agent/daemon/recommender.py)."""
    from agent.recommender.store import load

    settings = seeded["settings"]
    state, warning = load(settings.state_dir / settings.recommender.state_file, settings.recommender)
    assert warning is None
    return state


def _sampler_keys(seeded: dict[str, Any], vpa: str) -> set[tuple[str, str]]:
    """What the agent's sampler calls the containers of the pods `vpa` selects on the harness's node."""
    from agent.pods.parse import parse_pod
    from agent.recommender.publish import selects

    views = [parse_pod(p) for p in seeded["pods"]]
    chosen = [v for v in views if selects(seeded["own"].vpa_objects([vpa])[0], v)]
    return {(t.pod, t.container) for t in _targets(seeded, chosen)}


def test_the_state_is_written_where_the_agents_config_puts_it(seeded: dict[str, Any]) -> None:
    settings = seeded["settings"]
    assert seeded["written"].path == seeded["node"].dir / "state" / "recommender.json"
    assert seeded["written"].path == settings.state_dir / settings.recommender.state_file
    assert seeded["written"].path.stat().st_size == seeded["written"].bytes
    assert seeded["own"].seeded == ["svc-2", "svc-3"] and seeded["own"].young == ["svc-4"]


@pytest.mark.parametrize(("vpa", "aged"), [("svc-2", True), ("svc-3", True), ("svc-4", False)])
def test_the_seeded_keys_are_the_samplers_for_the_aged_vpas_pods_only(seeded: dict[str, Any], vpa: str, aged: bool) -> None:
    from agent.recommender.publish import partial

    state = _state(seeded)
    keys = _sampler_keys(seeded, vpa)
    assert len(keys) == 18 * len(dict((n, cs) for n, cs, _ in seeded["own"].recommended)[vpa])
    assert keys & state.histories.keys() == (keys if aged else set())
    # what the node publishes for the VPA (its pods' histories merged per container): 8 days, or nothing
    mine = partial(state, {pod for pod, _ in keys})
    assert bool(mine) is aged


def test_every_seeded_history_is_one_the_agent_would_publish(seeded: dict[str, Any]) -> None:
    state = _state(seeded)
    wanted = _sampler_keys(seeded, "svc-2") | _sampler_keys(seeded, "svc-3")
    assert state.histories.keys() == wanted
    assert seeded["written"].containers == len(wanted) == 18 * 3


def test_the_agents_own_samples_continue_the_seeded_histories(seeded: dict[str, Any]) -> None:
    """A real sampler tick on the node's tree: its samples' keys are the seeded ones, and they add to them."""
    from agent.pods.parse import parse_pod
    from agent.recommender.sampler import Sampler, reader_for

    state = _state(seeded)
    s = seeded["settings"]
    wanted = _targets(seeded, [parse_pod(p) for p in seeded["pods"]])
    sampler = Sampler(reader_for(s.cgroupfs, s.cgroup_root_name, s.cgroup_driver, seeded["hierarchy"]))
    sampler.tick(NOW + 1, wanted)
    for c in seeded["counters"]:
        c.path.write_text(f"{c.advance(1.0, 1.0)}\n")
    samples, _ = sampler.tick(NOW + 2, wanted)
    sampler.close()
    seen = {(s.pod, s.container) for s in samples if s.cpu is not None}
    assert state.histories.keys() <= seen
    before = {k: h.samples for k, h in state.histories.items()}
    state.observe_all(samples)
    assert all(state.histories[k].samples == n + 1 for k, n in before.items())
    assert all(state.histories[k].last_sample == NOW + 2 for k in before)


def _history(seeded: dict[str, Any], container: str) -> tuple[Any, usage.Counter]:
    state = _state(seeded)
    c = next(c for c in seeded["chosen"] if c.container == container)
    return state.histories[(c.pod, c.container)], c


@pytest.mark.parametrize("container", ["app", "proxy"])
def test_a_seeded_history_is_8_days_of_the_usage_model(seeded: dict[str, Any], container: str) -> None:
    from agent.recommender.estimate import confidence, recommend

    h, c = _history(seeded, container)
    settings = seeded["settings"].recommender
    assert (h.first_sample, h.last_sample, h.last_seen) == (NOW - DAYS_S, NOW, NOW)
    assert h.samples == int(DAYS_S // nodes.SEED_COUNT_STEP_S) + 1  # one a minute: the shortcut's count
    assert confidence(h, settings.confidence_interval_cpu_s) == pytest.approx(8.0)
    # memory: the working set each day's peak, as the add path keeps it (one peak an aggregation interval)
    assert h.memory_peak == c.working_set
    assert h.memory.percentile(1.0) == pytest.approx(settings.memory_options.bucket_start(
        settings.memory_options.find_bucket(c.working_set) + 1))
    # CPU: the base rate times a log-normal factor (σ 0.35): the median in the base's bucket, the 0.9
    # percentile in that of 1.57 times it (a percentile is the end of its bucket; one bucket either side)
    cpu = settings.cpu_options
    for p, at in ((0.5, c.cores), (0.9, c.cores * 1.566)):
        b = cpu.find_bucket(at)
        assert cpu.bucket_start(b) * 0.999 <= h.cpu.percentile(p) <= cpu.bucket_start(b + 2) * 1.001, (p, h.cpu.percentile(p), at)
    rec = recommend(h, settings, 2 if container == "proxy" else 1)
    assert rec.confidence == pytest.approx(8.0)
    assert rec.upper.cpu_milli < 1.5 * rec.target.cpu_milli  # a history of days: bounds near the target


@pytest.mark.parametrize(("step_s", "count_step_s", "added", "count"), [
    (600.0, 60.0, 1153, 11521),  # the harness's shortcut: 8 days every 10 minutes, counted as one a minute
    (3600.0, 60.0, 193, 11521),
    (600.0, 600.0, 1153, 1153),
])
def test_the_shortcut_adds_every_step_and_counts_every_count_step(step_s: float, count_step_s: float, added: int,
                                                                  count: int) -> None:
    from agent.recommender.config import RecommenderSettings

    c = usage.Counter(Path("/nonexistent"), 0.1, pod="ns/p", container="app", working_set=100 << 20)
    state = nodes.seeded_state(RecommenderSettings(), [c], NOW, random.Random(1), step_s=step_s, count_step_s=count_step_s)
    h = state.histories[("ns/p", "app")]
    assert h.samples == count
    ref = h.cpu.reference
    assert ref is not None
    # every sample added at the constant weight (0.1), decayed from its time (half-life a day)
    weights = [0.1 * 2 ** ((NOW - i * step_s - ref) / 86_400.0) for i in range(added)]
    assert h.cpu.hist.total == pytest.approx(sum(weights))


def test_a_counter_without_its_containers_key_is_refused() -> None:
    from agent.recommender.config import RecommenderSettings

    with pytest.raises(ValueError, match="key"):
        nodes.seeded_state(RecommenderSettings(), [usage.Counter(Path("/x"), 0.1)], NOW, random.Random(1))
