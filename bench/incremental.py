"""Figure 2: the agent's own work for ONE changed pod on a node of 10 and of 1,000 pods, I/O taken out.

Every cgroup file is read from and written to an in-memory tree (`bench.memtree`), the runtime applies
container updates to that tree at once, and checkpoints stay in memory, so what is timed is compute,
render, diff, plan and the bookkeeping around them. One event = one pod's CPU and memory limits changed
(a Guaranteed pod, so the QoS tiers' qos-reserved memory changes too). Timed per event:

- `pipeline pod pass`: `PipelineReconciler.reconcile_pod` (the daemon's pod work item);
- `pipeline tiers pass`: `PipelineReconciler.reconcile_tiers`, which the same event enqueues;
- `pipeline event` = both, what the daemon spends on the event today;
- `proposed tiers pass`: the tiers from running per-QoS sums updated by the changed pod alone
  (`IncrementalTiers`, a prototype of the API this figure proposes) instead of recomputing every pod;
- `engine event`: `EngineReconciler.reconcile_pod` (the resize engine's pass, tiers included), which
  `reconciler: auto` selects on a bare node.

The ratio 1,000/10 of the medians says whether a path is O(what changed) (target <= 1.5).
"""

from __future__ import annotations

import copy
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agent import pipeline
from agent.compute import NodeComputation, PodComputation, compute_pod
from agent.compute.qos import QOSDecision
from agent.compute.tiers import compute_tiers
from agent.daemon.engine_reconciler import EngineReconciler
from agent.daemon.ownership import resolve
from agent.daemon.pipeline_reconciler import PipelineReconciler
from agent.daemon.reconciler import Outcome
from agent.diff import desired_files, diff
from agent.execute import execute, file_runner
from agent.model import PodView, QOSClass, Resources
from agent.plan import build_plan, usage_paths
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from bench.memtree import MemCheckpoints, MemFiles, MemNode, MemRuntime, mem_node
from bench.stats import over_runs, summary
from cgroupfs import layout

SIZES = (10, 1000)
PIPELINE_EVENTS = 40  # events per run
ENGINE_EVENTS = 6  # the engine's pass is O(node): fewer events keep the 1,000-pod run short
NEVER: Callable[[], bool] = lambda: False  # noqa: E731 - the reconcilers' stop callback


class QuietPipeline(PipelineReconciler):
    """The daemon's pipeline reconciler without its checkpoint flush (disk I/O; timed on its own)."""

    def flush(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class _Total:
    """What `compute_tiers` reads of a pod (its QoS class and PodRequests), here for a whole QoS class."""

    qos: QOSDecision
    requests: Resources


class IncrementalTiers:
    """Prototype of the proposed API: the tiers depend on the pods only through three sums (Burstable CPU
    requests, memory requests per QoS class), kept as running totals. An event subtracts the pod's old
    contribution and adds its new one (O(1)); the tier values then come from the unchanged
    `compute_tiers` over one stand-in per QoS class, so they are the daemon's values exactly (checked:
    both trees must end up equal)."""

    def __init__(self, env: pipeline.Environment, pods: list[PodView]) -> None:
        self.env = env
        self.cfg = env.settings.compute_config(env.hugepage_sizes)
        self.parts: dict[str, tuple[QOSClass, int, int]] = {}
        self.cpu: dict[QOSClass, int] = dict.fromkeys(QOSClass, 0)
        self.memory: dict[QOSClass, int] = dict.fromkeys(QOSClass, 0)
        for pod in pods:
            self._account(pod.uid, compute_pod(pod, self.cfg))
        self.run_step = file_runner(env.files)

    def _account(self, uid: str, comp: PodComputation | None) -> None:
        old = self.parts.pop(uid, None)
        if old is not None:
            self.cpu[old[0]] -= old[1]
            self.memory[old[0]] -= old[2]
        if comp is not None:
            new = (comp.qos.qos, comp.requests.cpu_milli or 0, comp.requests.memory or 0)
            self.parts[uid] = new
            self.cpu[new[0]] += new[1]
            self.memory[new[0]] += new[2]

    def event(self, pod: PodView) -> int:
        env = self.env
        self._account(pod.uid, compute_pod(pod, self.cfg))  # the pod pass has this already: reuse it
        totals = [_Total(QOSDecision(q, "sum"), Resources(self.cpu[q], self.memory[q])) for q in QOSClass]
        tiers = compute_tiers(cast(Sequence[PodComputation], totals), self.cfg)
        node = NodeComputation((), tiers, (), ())
        wanted = desired_files(node, env.hierarchy, env.render_options, env.container_render_options, False)
        node_diff = diff(node, wanted, pipeline.observe(env, wanted))
        extra = {
            p: env.files.read(p)
            for p in usage_paths(node_diff)
            if p.rsplit("/", 1)[-1] not in (layout.MEMORY_USAGE_V1, layout.MEMORY_CURRENT)
        }
        plan = build_plan(node_diff, extra, include_containers=False)
        return execute(plan, self.run_step, None).writes


def changed_pod_index(raws: list[dict[str, Any]]) -> int:
    """A Guaranteed pod with limits only, no init containers, overhead or pod-level resources."""
    for i, raw in enumerate(raws):
        spec = raw["spec"]
        res = spec["containers"][0]["resources"]
        if (
            set(res) == {"limits"}
            and "initContainers" not in spec
            and "overhead" not in spec
            and "resources" not in spec
        ):
            return i
    raise RuntimeError("no Guaranteed pod in the generated node")


def resized(raw: dict[str, Any], k: int) -> PodView:
    """The pod with its first container's CPU and memory limits at the k-th value (alternating)."""
    out = copy.deepcopy(raw)
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    limits["cpu"], limits["memory"] = (("700m", "300Mi"), ("1300m", "400Mi"))[k % 2]
    return parse_pod(out)


def _pipeline(node: MemNode, files: MemFiles) -> QuietPipeline:
    env = node.environment(files)
    rec = QuietPipeline(node.settings, env, resolve({}, None, {}), MemRuntime(files, node.container_paths))
    for pod in node.pods:  # the daemon's first pass over the node (converged: no writes)
        rec.reconcile_pod(pod, NEVER)
    rec.reconcile_tiers(node.pods, NEVER)
    return rec


def run_pipeline(node: MemNode, events: int, first: int) -> dict[str, list[float]]:
    i = changed_pod_index(node.raws)
    as_is, proposed = node.files.copy(), node.files.copy()
    rec, rec2 = _pipeline(node, as_is), _pipeline(node, proposed)
    tiers2 = IncrementalTiers(node.environment(proposed), node.pods)
    out: dict[str, list[float]] = {"pod": [], "tiers": [], "event": [], "proposed_tiers": [], "proposed_event": []}
    writes: list[float] = []
    for k in range(first, first + events):
        pod = resized(node.raws[i], k)
        views = [*node.pods[:i], pod, *node.pods[i + 1 :]]  # the daemon's pod cache after the event
        before = as_is.writes
        t0 = time.perf_counter()
        report = rec.reconcile_pod(pod, NEVER)
        t1 = time.perf_counter()
        rec.reconcile_tiers(views, NEVER)
        t2 = time.perf_counter()
        if report.outcome is not Outcome.APPLIED:
            raise RuntimeError(f"event {k}: the pod pass was {report.outcome}: {report.errors}")
        writes.append(as_is.writes - before)
        t3 = time.perf_counter()
        rec2.reconcile_pod(pod, NEVER)
        t4 = time.perf_counter()
        tiers2.event(pod)
        t5 = time.perf_counter()
        out["pod"].append(t1 - t0)
        out["tiers"].append(t2 - t1)
        out["event"].append(t2 - t0)
        out["proposed_tiers"].append(t5 - t4)
        out["proposed_event"].append((t4 - t3) + (t5 - t4))
    if as_is.files != proposed.files:
        raise RuntimeError("the proposed tiers pass left a different tree than the daemon's")
    out["writes"] = writes
    return out


def run_engine(node: MemNode, events: int, first: int) -> dict[str, list[float]]:
    i = changed_pod_index(node.raws)
    files = node.files.copy()
    env = node.environment(files)
    rec = EngineReconciler(ResizeEngine(node.settings, env, MemRuntime(files, node.container_paths), store=MemCheckpoints()))
    rec.start(node.pods)
    rec.reconcile_tiers(node.pods, NEVER)
    out: dict[str, list[float]] = {"event": [], "writes": []}
    for k in range(first, first + events):
        pod = resized(node.raws[i], k)
        before = files.writes
        t0 = time.perf_counter()
        report = rec.reconcile_pod(pod, NEVER)
        out["event"].append(time.perf_counter() - t0)
        if report.outcome is not Outcome.APPLIED:
            raise RuntimeError(f"engine event {k}: {report.outcome}: {report.errors}")
        out["writes"].append(files.writes - before)
    return out


def call_counts(node: MemNode) -> dict[str, float]:
    """Python function calls per event (cProfile): a machine-independent measure of the work. Equal
    counts at 10 and 1,000 pods mean the path does exactly the same work whatever the node's size."""
    i = changed_pod_index(node.raws)
    files = node.files.copy()
    rec = _pipeline(node, files)
    tiers = IncrementalTiers(node.environment(files), node.pods)
    eng_files = node.files.copy()
    eng = EngineReconciler(
        ResizeEngine(node.settings, node.environment(eng_files), MemRuntime(eng_files, node.container_paths), store=MemCheckpoints())
    )
    eng.start(node.pods)
    eng.reconcile_tiers(node.pods, NEVER)
    out: dict[str, float] = {}
    for key, events in (("event", 10), ("proposed_event", 10), ("engine_event", 2)):
        profile = cProfile.Profile()
        for k in range(1, events + 1):
            pod = resized(node.raws[i], k)
            views = [*node.pods[:i], pod, *node.pods[i + 1 :]]
            profile.enable()
            if key == "event":
                rec.reconcile_pod(pod, NEVER)
                rec.reconcile_tiers(views, NEVER)
            elif key == "proposed_event":
                rec.reconcile_pod(pod, NEVER)
                tiers.event(pod)
            else:
                eng.reconcile_pod(pod, NEVER)
            profile.disable()
        out[key] = pstats.Stats(profile).total_calls / events  # type: ignore[attr-defined]
    return out


def flush_cost(node: MemNode, state_dir: Path, repeat: int) -> dict[str, float]:
    """The pipeline reconciler's checkpoint flush, which it runs once per resize (JSON of every pod,
    fsync): disk I/O, so outside the per-event figure, but O(node) and shown here."""
    rec = PipelineReconciler(node.settings, node.environment(node.files.copy()), resolve({}, None, {}), None)
    for pod in node.pods:
        rec.reconcile_pod(pod, NEVER)
    samples = []
    for _ in range(max(repeat, 5)):
        t0 = time.perf_counter()
        rec.flush()
        samples.append(time.perf_counter() - t0)
    return summary(samples)


def run(repeat: int = 7) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}, "events_per_run": {"pipeline": PIPELINE_EVENTS, "engine": ENGINE_EVENTS}}
    for n in SIZES:
        with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:
            node = mem_node(n, Path(tmp))
            pooled: dict[str, list[float]] = {}
            medians: dict[str, list[float]] = {}
            for r in range(repeat):
                got = run_pipeline(node, PIPELINE_EVENTS, first=r * PIPELINE_EVENTS + 1)
                for key, samples in got.items():
                    pooled.setdefault(key, []).extend(samples)
                    medians.setdefault(key, []).append(statistics.median(samples))
            engine_runs = min(repeat, 3)
            for r in range(engine_runs):
                got = run_engine(node, ENGINE_EVENTS, first=r * ENGINE_EVENTS + 1)
                for key, samples in got.items():
                    pooled.setdefault("engine_" + key, []).extend(samples)
                    medians.setdefault("engine_" + key, []).append(statistics.median(samples))
            figures: dict[str, Any] = {}
            for key, samples in pooled.items():
                if key.endswith("writes"):
                    figures[key] = summary(samples)
                else:
                    figures[key] = {"pooled_s": summary(samples), "run_medians_s": over_runs(medians[key])}
            figures["checkpoint_flush_s"] = flush_cost(node, Path(tmp) / "state", repeat)
            figures["calls_per_event"] = call_counts(node)
            out["sizes"][str(n)] = figures
    small, big = out["sizes"][str(SIZES[0])], out["sizes"][str(SIZES[-1])]
    out["ratio"] = {
        key: big[key]["pooled_s"]["median"] / small[key]["pooled_s"]["median"]
        for key in ("pod", "tiers", "event", "proposed_tiers", "proposed_event", "engine_event")
    }
    return out
