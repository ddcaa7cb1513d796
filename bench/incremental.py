"""Figure 2: the agent's own work for ONE changed pod on a node of 10 and of 1,000 pods.

Every cgroup file is read from and written to an in-memory tree (`bench.memtree`), and the runtime
applies container updates to that tree at once, so what is timed is compute, render, diff, plan,
admission and the bookkeeping around them. One event = one pod's CPU and memory limits changed (a
Guaranteed pod, so the QoS tiers' qos-reserved memory changes too), handed to the one reconciler as the
daemon hands it (`EngineReconciler.reconcile_pod`, built by `select_reconciler`). Timed per event:

- `bare`: a node without a kubelet that resizes (the agent owns everything: pod cgroup, tiers, the
  container through the runtime), the state store in memory;
- `bare_disk`: the same with the real per-pod state store on disk (write + fsync of the changed pod's
  record, one directory fsync): what a resize costs with its durability;
- `kubelet`: a node whose v1.36 kubelet resizes containers and pod cgroups: the agent follows the
  kubelet's allocation and moves the tiers only.

The ratio 1,000/10 of the medians says whether a path is O(what changed) (target <= 1.5).
"""

from __future__ import annotations

import copy
import cProfile
import gc
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.core.model import PodView
from agent.core.ownership import resolve
from agent.daemon import heap, select_reconciler
from agent.daemon.engine_reconciler import EngineReconciler
from agent.daemon.reconciler import Outcome
from agent.pods.parse import parse_pod
from bench.memtree import MemCheckpoints, MemFiles, MemNode, MemRuntime, mem_node
from bench.stats import over_runs, summary

SIZES = (10, 1000)
EVENTS = 40  # events per run
KINDS = ("bare", "bare_disk", "kubelet")
NEVER: Callable[[], bool] = lambda: False  # noqa: E731 - the reconcilers' stop callback


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


def reconciler(node: MemNode, kind: str, state_dir: Path) -> tuple[EngineReconciler, MemFiles]:
    """The daemon's reconciler over a copy of the node's tree, after its first node-wide pass."""
    files = node.files.copy()
    settings = node.settings.__class__(**{**_fields(node.settings), "state_dir": state_dir})
    kubelet = "v1.36.0" if kind == "kubelet" else None
    rec = select_reconciler(
        settings, node.environment(files), resolve({}, kubelet, {}), MemRuntime(files, node.container_paths)
    )
    assert isinstance(rec, EngineReconciler)
    if kind != "bare_disk":
        rec.engine.persist.store = MemCheckpoints()
    rec.start(node.pods)
    rec.reconcile_tiers(node.pods, NEVER)
    gc.unfreeze()  # the previous run's reconciler: collected, not kept frozen
    heap.settle()  # as the daemon after its first full pass
    return rec, files


def _fields(settings: Any) -> dict[str, Any]:
    return {f: getattr(settings, f) for f in settings.__dataclass_fields__}


def run_kind(node: MemNode, kind: str, events: int, first: int, state_dir: Path) -> dict[str, list[float]]:
    i = changed_pod_index(node.raws)
    rec, files = reconciler(node, kind, state_dir)
    out: dict[str, list[float]] = {"event": [], "writes": []}
    for k in range(first, first + events):
        pod = resized(node.raws[i], k)
        before = files.writes
        t0 = time.perf_counter()
        report = rec.reconcile_pod(pod, NEVER)
        out["event"].append(time.perf_counter() - t0)
        if report.outcome is not Outcome.APPLIED:
            raise RuntimeError(f"{kind} event {k}: {report.outcome}: {report.errors}")
        out["writes"].append(files.writes - before)
    return out


def call_counts(node: MemNode, state_dir: Path) -> dict[str, float]:
    """Python function calls per event (cProfile): a machine-independent measure of the work. Equal
    counts at 10 and 1,000 pods mean the path does the same work whatever the node's size."""
    i = changed_pod_index(node.raws)
    out: dict[str, float] = {}
    for kind in ("bare", "kubelet"):
        rec, _ = reconciler(node, kind, state_dir / f"calls-{kind}")
        profile = cProfile.Profile()
        for k in range(1, 11):
            pod = resized(node.raws[i], k)
            profile.enable()
            rec.reconcile_pod(pod, NEVER)
            profile.disable()
        out[kind] = pstats.Stats(profile).total_calls / 10  # type: ignore[attr-defined]
    return out


def run(repeat: int = 7) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}, "events_per_run": EVENTS, "kinds": list(KINDS)}
    for n in SIZES:
        with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:
            node = mem_node(n, Path(tmp))
            pooled: dict[str, list[float]] = {}
            medians: dict[str, list[float]] = {}
            for r in range(repeat):
                for kind in KINDS:
                    got = run_kind(node, kind, EVENTS, r * EVENTS + 1, Path(tmp) / f"state-{kind}-{r}")
                    for key, samples in got.items():
                        name = f"{kind}_{key}"
                        pooled.setdefault(name, []).extend(samples)
                        medians.setdefault(name, []).append(statistics.median(samples))
            figures: dict[str, Any] = {}
            for key, samples in pooled.items():
                if key.endswith("writes"):
                    figures[key] = summary(samples)
                else:
                    figures[key] = {"pooled_s": summary(samples), "run_medians_s": over_runs(medians[key])}
            figures["calls_per_event"] = call_counts(node, Path(tmp))
            out["sizes"][str(n)] = figures
    small, big = out["sizes"][str(SIZES[0])], out["sizes"][str(SIZES[-1])]
    out["ratio"] = {
        kind: big[f"{kind}_event"]["pooled_s"]["median"] / small[f"{kind}_event"]["pooled_s"]["median"]
        for kind in KINDS
    }
    return out
