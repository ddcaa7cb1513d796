"""The tiers from running totals equal the tiers recomputed over every pod, after any sequence of pod
events: the pure accumulator (`RunningTierSums`) and the reconciler (the resize engine) that keeps one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.settings import Settings
from agent.core.compute import PodComputeError, compute_node, compute_pod
from agent.core.compute.node import TERMINAL_PHASES
from agent.core.compute.tiers import (
    NO_SUMS,
    RunningTierSums,
    compute_tiers,
    compute_tiers_from_sums,
    tier_contribution,
    tier_sums,
)
from agent.core.model import PodView, Resources
from agent.pipeline import Environment
from agent.resize.engine import ResizeEngine
from cgroupfs.layout import Hierarchy
from tests.unit.podbuild import ctr, pod, view

cpu = st.sampled_from(["10m", "250m", "1", "1500m"])
mem = st.sampled_from(["64Mi", "128Mi", "1Gi"])


@st.composite
def pod_spec(draw: st.DrawFn, i: int) -> PodView:
    containers = []
    for j in range(draw(st.integers(min_value=1, max_value=2))):
        kind = draw(st.sampled_from(["none", "req", "guaranteed", "invalid"]))  # BestEffort/Burstable/...
        req: dict[str, Any] | None = None
        lim: dict[str, Any] | None = None
        if kind == "req":
            req = {"cpu": draw(cpu), "memory": draw(mem)}
        elif kind == "guaranteed":
            req = lim = {"cpu": draw(cpu), "memory": draw(mem)}
        elif kind == "invalid":  # requests above limits: the pod cannot be computed
            req, lim = {"cpu": "2"}, {"cpu": "1"}
        containers.append(ctr(f"c{j}", req=req, lim=lim))
    raw = pod(f"p{i}", containers, uid=f"uid-{i}")
    if draw(st.booleans()) and draw(st.booleans()):
        raw["status"] = {"phase": draw(st.sampled_from(["Running", "Succeeded", "Failed"]))}
    return view(raw)


@st.composite
def events(draw: st.DrawFn) -> list[tuple[str, int, PodView | None]]:
    out: list[tuple[str, int, PodView | None]] = []
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        i = draw(st.integers(min_value=0, max_value=5))
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            out.append(("delete", i, None))
        else:
            out.append(("upsert", i, draw(pod_spec(i))))
    return out


CFG = Settings(allocatable=Resources(8000, 32 * 1024**3), qos_reserved_memory_percent=50).compute_config(
    (2 * 1024**2,)
)


@settings(max_examples=80, deadline=None)
@given(events())
def test_running_totals_give_the_tiers_of_every_pod(evs: list[tuple[str, int, PodView | None]]) -> None:
    running = RunningTierSums()
    live: dict[str, PodView] = {}
    for _, i, p in evs:
        if p is None:
            live.pop(f"uid-{i}", None)
            running.drop(f"uid-{i}")
            continue
        live[p.uid] = p
        try:
            part = NO_SUMS if p.phase in TERMINAL_PHASES else tier_contribution(compute_pod(p, CFG))
        except PodComputeError:
            part = NO_SUMS  # compute_node leaves it out too
        running.put(p.uid, p, part)
    comp = compute_node(live.values(), CFG)
    assert running.total == tier_sums(comp.pods)
    assert compute_tiers_from_sums(running.total, CFG) == compute_tiers(comp.pods, CFG) == comp.tiers


class _NoFiles:
    """The reconciler's file access, empty: no pod cgroup exists, so pod passes stop at WAITING."""

    def read(self, relpath: str) -> str | None:
        return None

    def read_many(self, relpaths: Any) -> tuple[dict[str, str | None], dict[str, bool]]:
        paths = list(relpaths)
        return dict.fromkeys(paths), {p.rpartition("/")[0]: False for p in paths}

    def exists(self, reldir: str) -> bool:
        return False


@settings(max_examples=60, deadline=None)
@given(events())
def test_the_reconcilers_running_totals_follow_any_event_sequence(evs: list[tuple[str, int, PodView | None]]) -> None:
    """As the daemon feeds it: pod updates and departures in any order; after each, the engine's running
    tier sums are those of the live pods as they ask (the kubelet's QoS pass counts its pod manager's
    pods, not their allocation), at their allocated values only where the spec cannot be computed."""
    s = Settings(
        allocatable=Resources(8000, 32 * 1024**3),
        qos_reserved_memory_percent=50,
        state_dir=Path("/nonexistent"),
    )
    env = Environment(
        s, Hierarchy(v1={"cpu": "cpu", "memory": "memory"}), (2 * 1024**2,), cast(Any, _NoFiles())
    )
    engine = ResizeEngine(s, env, None)
    cfg = s.compute_config(env.hugepage_sizes)
    for _, i, p in evs:
        if p is None:
            engine.remove(f"uid-{i}")  # type: ignore[arg-type]
        else:
            engine.update(p)
        engine.snapshot(cast(Any, _NoFiles()))  # a pass's read: the totals are brought up to date
        allocated = {v.uid: v for v in engine.effective_pods()}
        counted = []
        for uid, v in engine.book.pods.items():
            if v.phase in TERMINAL_PHASES:
                continue
            for candidate in (v, allocated[uid]):
                try:
                    counted.append(compute_pod(candidate, cfg))
                except PodComputeError:
                    continue
                break
        assert engine.tally.sums.total == tier_sums(counted)
        assert compute_tiers_from_sums(engine.tally.sums.total, cfg) == compute_tiers(counted, cfg)
