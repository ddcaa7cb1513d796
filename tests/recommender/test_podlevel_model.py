"""The pod level's model against the independent reference of test_model, on recorded pod-cgroup traces of a
two-container pod (tests/recommender/traces, written by podlevel_make.py), one with an OOM kill of each
container: the traces are replayed through the sampler on a fake v1 and v2 pod cgroup into the state, and
the reference reads the same trace directly — CPU cores between readings, the working set (usage − inactive
file pages), each 24 h interval's peak, an OOM kill as VPA's bump of max(peak file, working set) — then its
own decaying weights and bucket ends. Targets and bounds must agree within one histogram bucket (they agree
exactly: the distances are printed with -s)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.core.model import POD
from agent.recommender.estimate import recommend
from agent.recommender.sampler import Sampler, reader_for, targets
from agent.recommender.state import RecommenderState
from cgroupfs.types import CgroupName
from tests.recommender.podcgroup import MI, PodCgroup, Reading, pod
from tests.recommender.test_model import DAY, S, ref_percentile, with_margin
from tests.support.cgroup_tree import FakeCgroupTree

TRACES = Path(__file__).parent / "traces"
CPU_FIRST, MEMORY_FIRST = 0.01, 1e7


def _lines(name: str) -> list[dict[str, list[float]]]:
    return [json.loads(line) for line in (TRACES / name).read_text().splitlines()]


def _replay(tree: FakeCgroupTree, mode: str, lines: list[dict[str, list[float]]]) -> RecommenderState:
    cg = PodCgroup(tree, mode)
    wanted = targets([pod()], CgroupName(()), tree.driver, tree.hierarchy)
    sampler = Sampler(reader_for(tree.root, CgroupName(()), tree.driver, tree.hierarchy), oom_every=1, stat_every=1)
    state = RecommenderState(S)
    for row in lines:
        readings = {}
        for name in ("", "app", "side"):
            cpu, usage, inactive, peak, kills = row[name]
            own_kills = 0 if (mode == "v1" and name == POD) else int(kills)  # v1: a kill counts in the victim's cgroup only
            readings[name] = Reading(cpu, int(usage), int(inactive), int(peak), own_kills)
        cg.write(readings)
        samples, _ = sampler.tick(float(row["ts"]), wanted)  # type: ignore[arg-type]
        state.observe_all(samples)
    sampler.close()
    return state


def _reference(lines: list[dict[str, list[float]]]) -> dict[str, int]:
    """The pod cgroup's recommendation from the trace itself (target, lower, upper; CPU in millicores)."""
    cpu: list[tuple[float, float, float]] = []
    intervals: dict[int, float] = {}  # interval -> the memory sample it keeps (its peak, or the OOM bump)
    t_mem0 = float(lines[0]["ts"])  # type: ignore[arg-type]
    previous = None
    for row in lines:
        t = float(row["ts"])  # type: ignore[arg-type]
        used_s, usage, inactive, peak, _ = row[POD]
        kills = row["app"][4] + row["side"][4]
        ws = max(usage - inactive, 0)
        k = int((t - t_mem0) // DAY)
        if previous is not None:
            cpu.append(((used_s - previous[0]) / (t - previous[1]), 0.1, t))
            if kills > previous[2]:  # an OOM: a sample at max(peak, ws), then max(used + 100Mi, 1.2 × used)
                used = max(intervals.get(k, 0.0), max(peak, ws))
                intervals[k] = max(intervals.get(k, 0.0), used, max(used + 100 * MI, used * 1.2))
        intervals[k] = max(intervals.get(k, 0.0), ws)
        previous = (used_s, t, kills)
    memory = [(v, 1.0, t_mem0 + (k + 1) * DAY) for k, v in sorted(intervals.items())]
    span_days = (cpu[-1][2] - cpu[0][2]) / DAY
    confidence = min(span_days, len(cpu) / 1440)

    def bound(x: int, mult: float, exp: float) -> int:
        return int(x * (1 + mult / confidence) ** exp)

    def c(p: float) -> int:
        return with_margin(int(ref_percentile(cpu, p, CPU_FIRST) * 1000))

    def m(p: float) -> int:
        return with_margin(int(ref_percentile(memory, p, MEMORY_FIRST)))

    min_cpu, min_mem = 25, 250 * MI  # the pod minimums, whole: no containers share them at the pod level
    return {"cpu": max(c(0.9), min_cpu), "cpu_lower": max(bound(c(0.5), 0.001, -2), min_cpu),
            "cpu_upper": max(bound(c(0.95), 1.0, 1.0), min_cpu), "memory": max(m(0.9), min_mem),
            "memory_lower": max(bound(m(0.5), 0.001, -2), min_mem), "memory_upper": max(bound(m(0.95), 1.0, 1.0), min_mem)}


def _buckets(a: float, b: float, first: float) -> float:
    """How many histogram buckets apart two values are (buckets 5 % apart from `first`)."""
    def index(x: float) -> float:
        return math.log(x * 0.05 / first + 1) / math.log(1.05)
    return abs(index(a) - index(b))


@pytest.mark.parametrize("trace", ["podlevel-oom.jsonl", "podlevel-days.jsonl"])
@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_the_pod_level_model_agrees_with_the_reference(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str, trace: str
) -> None:
    lines = _lines(trace)
    state = _replay(fake_cgroup_tree(mode), mode, lines)
    h = state.histories[("shop/api", POD)]
    assert h.ooms == 1  # one container's kill, the pod's OOM
    r = recommend(h, S, 1)
    got = {"cpu": r.target.cpu_milli, "cpu_lower": r.lower.cpu_milli, "cpu_upper": r.upper.cpu_milli,
           "memory": r.target.memory, "memory_lower": r.lower.memory, "memory_upper": r.upper.memory}
    want = _reference(lines)
    distances = {k: _buckets(got[k], want[k], CPU_FIRST * 1000 if k.startswith("cpu") else MEMORY_FIRST) for k in got}
    print(f"\n{trace} {mode}: model {got}\n  reference {want}\n  buckets apart {distances}")
    assert all(d <= 1.0 for d in distances.values()), distances
    # the OOM raised the pod's memory target above anything its working set reached
    assert r.target.memory > max(row[POD][1] - row[POD][2] for row in lines)
