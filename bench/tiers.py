"""Figure 6: from a resize to the QoS tiers being current — the daemon with 1,000 pods.

The machinery of figure 5 (bench.daemon): a generated node of 1,000 pods on a converged fake cgroup tree
on disk, the fake CRI server mirroring container updates into it, the daemon in its own process wired as
`kube-cgroup-agent run` with pod events pushed to it as a watch would. Here the child runs with
`--watch-tiers`: each event carries the values the Burstable and BestEffort tiers' memory limits must
take (qos-reserved), computed here independently (`compute_tiers` over every pod, not the daemon's
running totals), and the child reads both files back after every cgroup write to one of them and at the
end of every pass. Timed: from the pod update being handed to the daemon (`sink.upsert`) until both files
read back at their new values (page-rounded, as the kernel stores them); recorded with it: which pass got
them there (the resized pod's own pass, the tiers pass the same event enqueues, or a later one) and
whether they ever left those values again before the event's passes were done.

One generated node per qos-reserved memory setting (50 %, 100 %); on it, per run, one daemon on a bare
node (its one reconciler), each a fresh process with its own state directory, started on pods.json
rewritten to the pods as the previous daemon left them (so its first pass finds the tree converged). In
each daemon EVENTS_PER_DIRECTION Guaranteed pods get a larger memory limit ("up": +256Mi, the tiers
shrink) and as many others a smaller one ("down": halved, the tiers grow), alternating, one event at a
time; no pod is resized twice.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.config.settings import from_mapping
from agent.core.compute import PodComputation, compute_pod
from agent.core.compute.config import ComputeConfig
from agent.core.compute.tiers import compute_tiers
from agent.core.model import TierKind
from agent.pods.parse import parse_pod
from agent.pods.quantity import to_int
from bench.daemon import N_PODS, READY_TIMEOUT_S, Child, FakeNode, fake_node, spawn, stop_child, wait_ready
from bench.daemon_child import reads_as
from bench.gen import HIERARCHY
from bench.stats import over_runs, summary
from cgroupfs import layout
from cgroupfs.types import Controller, DriverKind

RECONCILERS = ("bare",)  # the one reconciler; on a kubelet-owned node the tiers move the same way
QOS_RESERVED = ("50%", "100%")
DIRECTIONS = ("up", "down")
EVENTS_PER_DIRECTION = 10  # per run (the node has ~160 such pods; none is resized twice)
MAX_RUNS = 3
UP_BYTES = 256 << 20
EVENT_TIMEOUT_S = 20.0  # the kubelet's baseline is 31-54 s; anything near this is a failure anyway
GAP_S = 0.05  # between events, as figure 5
KUBELET_STALE_S = (31.0, 54.0)  # ../shared/research/kubelet-observed.md: observed, not measured here


def eligible(raws: Sequence[dict[str, Any]]) -> list[int]:
    """Guaranteed pods whose first container has limits only (requests default to them) and no init
    containers, overhead or pod-level resources: changing that one memory limit is a clean resize."""
    return [
        i
        for i, r in enumerate(raws)
        if set(r["spec"]["containers"][0]["resources"]) == {"limits"}
        and not {"initContainers", "overhead", "resources"} & set(r["spec"])
    ]


def resized(raw: dict[str, Any], direction: str) -> dict[str, Any]:
    """The pod with its first container's memory limit up by 256Mi or halved (page-aligned either way)."""
    out = copy.deepcopy(raw)
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    old = to_int(limits["memory"], "memory limit")
    new = old + UP_BYTES if direction == "up" else old // 2
    limits["memory"] = str(new // 4096 * 4096)
    return out


def schedule(indices: Sequence[int], per_direction: int) -> list[tuple[int, str]]:
    """(pod index, direction) for one run: up, down, up, down ... one pod each."""
    if len(indices) < 2 * per_direction:
        raise RuntimeError(f"only {len(indices)} pods for {2 * per_direction} events")
    return [(indices[k], DIRECTIONS[k % 2]) for k in range(2 * per_direction)]


def tier_memory_files(comps: Sequence[PodComputation], cfg: ComputeConfig) -> dict[str, int]:
    """{relative path: bytes} of the Burstable and BestEffort tiers' memory limits for these pods."""
    out: dict[str, int] = {}
    for tier in compute_tiers(comps, cfg):
        if tier.kind is TierKind.NODE:
            continue
        if tier.values.memory_limit is None:
            raise RuntimeError(f"no qos-reserved memory limit for the {tier.kind.value} tier")
        directory = layout.cgroup_directory(tier.cgroup, Controller.MEMORY, HIERARCHY, DriverKind.CGROUPFS)
        assert directory is not None
        out[f"{directory}/{layout.MEMORY_LIMIT}"] = tier.values.memory_limit
    return out


class Model:
    """The node as the daemon's cache holds it after each event, and the tier files it implies."""

    def __init__(self, raws: list[dict[str, Any]], config: dict[str, Any]) -> None:
        self.raws = list(raws)
        self.config = config
        settings = from_mapping(config)
        self.cfg = settings.compute_config(settings.hugepage_sizes or ())
        self.comps = [compute_pod(parse_pod(r), self.cfg) for r in raws]

    def tiers(self) -> dict[str, int]:
        return tier_memory_files(self.comps, self.cfg)

    def apply(self, i: int, raw: dict[str, Any]) -> None:
        self.raws[i] = raw
        self.comps[i] = compute_pod(parse_pod(raw), self.cfg)


def _read(cgroupfs: Path, relpath: str) -> str | None:
    try:
        return (cgroupfs / relpath).read_text()
    except OSError:
        return None


def _await_done(child: Child, uid: str) -> dict[str, Any]:
    """The child's lines for this event until its "watch_done" (or the timeout)."""
    got: dict[str, Any] = {}
    deadline = time.perf_counter() + EVENT_TIMEOUT_S
    while (left := deadline - time.perf_counter()) > 0:
        line = child.read_line(left)
        if line is None:
            break
        if line.get("uid") != uid:
            continue
        if line.get("watch_done"):
            return {**got, **line}
        if "tiers_current_s" in line:
            got.update(line)
        elif "pod_s" in line:
            got["pod_s"] = line["pod_s"]
        elif "tiers_s" in line:  # the tiers pass the event enqueued: what it still had to write
            got["tiers_pass_writes"] = line["writes"]
    got["timed_out"] = True
    return got


def run_daemon(kind: str, fake: FakeNode, model: Model, events: Sequence[tuple[int, str]], tag: str) -> dict[str, Any]:
    """One daemon on the node as `model` holds it (pods.json rewritten to match the tree first): the
    events one at a time, each as the child reported it."""
    (fake.dir / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": model.raws}))
    cgroupfs = Path(fake.config["cgroupfs"])
    child = spawn(kind, fake.dir, fake.config, "--watch-tiers", tag=tag)
    out: dict[str, Any] = {"events": []}
    try:
        ready, _ = wait_ready(child, READY_TIMEOUT_S[kind])
        if ready is None:
            out["error"] = f"the daemon had not finished its first pass after {READY_TIMEOUT_S[kind]:.0f} s"
            return out
        out["ready_s"] = ready["ready"]
        time.sleep(0.5)
        for i, direction in events:
            before, raw = model.tiers(), resized(model.raws[i], direction)
            shown = {p: _read(cgroupfs, p) for p in before}
            if not all(reads_as(shown[p], v) for p, v in before.items()):
                out["error"] = f"before event {len(out['events']) + 1}: the tier files show {shown}, not {before}"
                break
            model.apply(i, raw)
            after = model.tiers()
            if any(reads_as(shown[p], v) for p, v in after.items()):
                raise RuntimeError(f"event on {raw['metadata']['name']} does not move both tiers: {after}")
            uid = raw["metadata"]["uid"]
            child.send({"pod": raw, "expect": after})
            got = _await_done(child, uid)
            shown = {p: _read(cgroupfs, p) for p in after}  # read back here too, independently
            got["direction"] = direction
            got["pod"] = raw["metadata"]["name"]
            got["tier_change_bytes"] = {p: after[p] - before[p] for p in after}
            got["read_back_here"] = all(reads_as(shown[p], v) for p, v in after.items())
            out["events"].append(got)
            if got.get("timed_out"):
                out["error"] = f"event {len(out['events'])} ({direction}): not settled within {EVENT_TIMEOUT_S:.0f} s"
                break
            time.sleep(GAP_S)
    finally:
        stop_child(child)
    return out


def _cell(events: list[dict[str, Any]], per_run_medians: list[float]) -> dict[str, Any]:
    current = [e["tiers_current_s"] for e in events if e.get("tiers_current_s") is not None]
    pod = [e["pod_applied_s"] for e in events if e.get("pod_applied_s") is not None]
    by: dict[str, int] = {}
    passes: dict[str, int] = {}
    for e in events:
        key = e.get("by") or "never"
        by[key] = by.get(key, 0) + 1
        passes[str(e.get("pass"))] = passes.get(str(e.get("pass")), 0) + 1
    return {
        "tiers_current_s": summary(current) if current else None,
        "run_medians_s": over_runs(per_run_medians) if per_run_medians else None,
        "pod_applied_s": summary(pod) if pod else None,
        "by": by,
        "pass": passes,
        "tiers_pass_wrote": sum(1 for e in events if e.get("tiers_pass_writes")),
        "reverted": sum(e.get("reverted", 0) for e in events),
        "not_current_at_end": sum(1 for e in events if not e.get("current_at_end")),
        "not_read_back_here": sum(1 for e in events if not e.get("read_back_here")),
        "timed_out": sum(1 for e in events if e.get("timed_out")),
        "n": len(events),
    }


def run(repeat: int = 7) -> dict[str, Any]:
    runs = max(1, min(repeat, MAX_RUNS))
    out: dict[str, Any] = {
        "pods": N_PODS,
        "runs": runs,
        "events_per_direction_per_run": EVENTS_PER_DIRECTION,
        "up_bytes": UP_BYTES,
        "event_timeout_s": EVENT_TIMEOUT_S,
        "kubelet_observed_stale_s": list(KUBELET_STALE_S),
        "loadavg_before": list(os.getloadavg()),
        "cells": {},
        "errors": [],
    }
    t0 = time.perf_counter()
    for qos in QOS_RESERVED:
        pooled: dict[tuple[str, str], list[dict[str, Any]]] = {}
        medians: dict[tuple[str, str], list[float]] = {}
        ready: dict[str, list[float]] = {kind: [] for kind in RECONCILERS}
        with fake_node(qos) as fake:  # one node per setting; every event resizes a pod not resized before
            model = Model(fake.raws, fake.config)
            pods = iter(eligible(fake.raws))
            for r in range(runs):
                for kind in RECONCILERS:
                    print(f"bench: tiers ({kind}, qos-reserved {qos}, run {r + 1}/{runs}) ...", file=sys.stderr, flush=True)
                    events = schedule([next(pods) for _ in range(2 * EVENTS_PER_DIRECTION)], EVENTS_PER_DIRECTION)
                    got = run_daemon(kind, fake, model, events, tag=f"-tiers-{qos.rstrip('%')}-{r}")
                    if "ready_s" in got:
                        ready[kind].append(got["ready_s"])
                    if "error" in got:
                        out["errors"].append(f"{kind}, qos-reserved {qos}, run {r + 1}: {got['error']}")
                    for d in DIRECTIONS:
                        mine = [e for e in got["events"] if e["direction"] == d]
                        pooled.setdefault((kind, d), []).extend(mine)
                        samples = [e["tiers_current_s"] for e in mine if e.get("tiers_current_s") is not None]
                        if samples:
                            medians.setdefault((kind, d), []).append(statistics.median(samples))
        for kind in RECONCILERS:
            out["cells"][f"{kind} {qos}"] = {
                "reconciler": kind,
                "qos_reserved": qos,
                "ready_s": ready[kind],
                **{d: _cell(pooled.get((kind, d), []), medians.get((kind, d), [])) for d in DIRECTIONS},
            }
    out["loadavg_after"] = list(os.getloadavg())
    out["wall_s"] = time.perf_counter() - t0
    return out
