"""Soak: the real daemon (`kube-cgroup-agent run`, a subprocess) under a steady stream of pod events with
faults injected, watched from outside for leaks, lost resizes and latency drift.

Why from outside: a leak or a slow drift shows only in the process as it runs for minutes, and a lost
resize only in the files the node ends with. The node is the daemon tests' (tests/daemon/harness.py): a
fake API server speaking HTTP to the real client, a strict fake cgroup v1 tree, the fake CRI server, and
ResizeNode playing the kubelet (pod and container cgroups, containers) and runc (every runtime update
mirrored into the tree, and the pod it touched checked child <= parent right after).

One run: `pods` pods (Guaranteed, Burstable, BestEffort; one to three containers) are created and
published, the daemon starts and converges; then `events` pod events go out at an even rate over
`duration_s` (mostly resizes, some deletes and re-creates around `pods`, status-only updates) while
faults are injected at a steady rate (API 500/429, dropped watches, 410 Gone, CRI errors). Every
`probe_every`-th resize is timed from `cluster.apply` to the node's files showing it. Then the faults
stop, the node converges, and every live pod's files are compared with its spec. The daemon's RSS,
file descriptors, threads and children are sampled throughout; "first" and "last" figures are over the
first and last tenth of the event phase (the first and last minute of a 10-minute run).
The tests/reliability runner calls `run_soak` in a full form and a short CI form (same code path).
Here: the node, the run's phases and their timing; the pods and events are soak_events, the faults
soak_faults, the watchers soak_watchers, what is reported soak_figures.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

from tests.daemon.harness import Daemon, Env, node_object, serving, wait_for
from tests.reliability.soak_events import Run
from tests.reliability.soak_faults import FAULTS, disarm
from tests.reliability.soak_figures import SoakResult, Windows, log_figures, resource_figures
from tests.reliability.soak_watchers import Prober, Sampler, cpu_seconds
from tests.resize.harness import ResizeNode, kubelet_mismatches
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri

# big enough that no resize is ever Deferred for want of room (the soak is about leaks, not admission)
NODE_CPU, NODE_MEMORY = "256", "1Ti"


def _mismatched(run: Run) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in run.live:
        try:
            found = kubelet_mismatches(run.env.node, name)
        except (OSError, ValueError) as err:
            found = [str(err)]
        if found:
            out[name] = found
    return out


def _start(run: Run, daemon: Daemon, started: float) -> float:
    """Wait for /readyz and every pod's files at its spec; seconds since the daemon started."""
    pods = len(run.live)
    wait_for(lambda: daemon.get("/readyz")[0] == 200, "/readyz to answer 200", timeout=60 + pods / 10)
    _, behind = _converge(run, 60 + pods / 5)
    if behind:
        raise AssertionError(f"the daemon did not converge at start: {sorted(behind.items())[:3]}")
    return round(time.monotonic() - started, 2)


def _converge(run: Run, timeout_s: float) -> tuple[float, dict[str, list[str]]]:
    """Wait for every live pod's files to match its spec; (seconds taken, what still differs)."""
    start = time.monotonic()
    with suppress(AssertionError):
        wait_for(lambda: not _mismatched(run), "every live pod at its spec", timeout=timeout_s)
    return round(time.monotonic() - start, 2), _mismatched(run)


def _drive(run: Run, events: int, duration_s: float, fault_every_s: float | None, probe_every: int) -> float:
    """Send the events at an even rate and inject faults on their own schedule; returns the worst lag."""
    start = time.monotonic()
    gap = duration_s / max(events, 1)
    kinds = list(FAULTS)
    run.rng.shuffle(kinds)
    next_fault, worst_lag, resizes = fault_every_s, 0.0, 0
    for i in range(events):
        due = i * gap
        now = time.monotonic() - start
        if now < due:
            time.sleep(due - now)
        t_s = time.monotonic() - start
        worst_lag = max(worst_lag, t_s - due)
        while fault_every_s is not None and next_fault is not None and next_fault <= t_s:
            run.inject(kinds[sum(run.faults.values()) % len(kinds)])
            next_fault += fault_every_s
        kind = run.event(t_s, probe=resizes % probe_every == 0)
        resizes += kind == "resize"
        run.sent[kind] += 1
    left = duration_s - (time.monotonic() - start)
    if left > 0:
        time.sleep(left)
    return round(worst_lag, 3)


@contextmanager
def _node(workdir: Path) -> Iterator[Env]:
    """The daemon tests' node, built outside pytest, on a Node big enough that no resize waits for room;
    everything started here is stopped here (a daemon left running by an error: SIGTERM, by its PID)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with running_fake_cri(workdir) as cri:
        tree = FakeCgroupTree(workdir / "tree", "v1")
        node = ResizeNode(tree, cri, workdir / "harness-state", allocatable=f"cpu={NODE_CPU},memory={NODE_MEMORY}")
        node.check_every_pod = False  # O(pods) per runtime write otherwise; check() at the end sees all
        big = node_object()
        big["status"]["capacity"] = big["status"]["allocatable"] = {"cpu": NODE_CPU, "memory": NODE_MEMORY}
        with serving(workdir, node, cri, big, graceful=True) as env:
            yield env


def run_soak(
    workdir: Path,
    *,
    pods: int,
    events: int,
    duration_s: float,
    seed: int = 0,
    faults: bool = True,
    fault_every_s: float = 2.0,
    probe_every: int | None = None,
    sample_every_s: float | None = None,
    converge_timeout_s: float = 180.0,
) -> SoakResult:
    """Run one soak in `workdir` (created; the tree, the state, the daemon's config and log stay there).
    Raises AssertionError when the daemon never gets ready or never converges before the events."""
    began = time.monotonic()
    every = sample_every_s or min(5.0, max(1.0, duration_s / 60))
    # 1 resize in 20 on a long run; more on a short one, so that each tenth still holds a few dozen
    probe_every = probe_every or max(2, min(20, events // 400))
    with _node(workdir) as env:
        run = Run(env, random.Random(seed), pods)
        for _ in range(pods):
            run.create()
        started = time.monotonic()
        daemon = env.daemon()
        with Sampler(daemon, every) as sampler, Prober(env.node, run.applied) as prober:
            startup_s = _start(run, daemon, started)
            run.prober = prober
            phase, wall0, harness0 = time.monotonic(), time.time(), cpu_seconds(psutil.Process())
            lag = _drive(run, events, duration_s, fault_every_s if faults else None, probe_every)
            harness_cpu = (cpu_seconds(psutil.Process()) - harness0) / (time.monotonic() - phase)
            unconsumed = disarm(env)
            converge_s, lost = _converge(run, converge_timeout_s)
            unresolved = prober.close()
            samples = sampler.close(phase)
        violations = [*env.node.violations, *env.node.check()]
        healthz = daemon.get("/healthz")[0]
        exit_code = daemon.terminate()
        pod_w, tiers_w, crashes, raw = log_figures(daemon, wall0, duration_s)
    (workdir / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in run.journal))
    return SoakResult(
        pods=pods, events=events, duration_s=duration_s, seed=seed, faults=faults,
        events_sent=sum(run.sent.values()),
        events_by_kind=dict(run.sent),
        send_lag_max_s=lag,
        faults_injected=sum(run.faults.values()),
        faults_by_kind=dict(run.faults),
        faults_unconsumed=unconsumed,
        pods_checked=len(run.live),
        containers_checked=sum(len(run.shapes[p].styles) for p in run.live),
        resizes_checked=len(run.resized),
        resizes_lost=len(lost),
        lost_samples=tuple(f"{p}: {m[0]}" for p, m in sorted(lost.items())[:5]),
        probes=prober.count,
        probes_unresolved=unresolved,
        violations=len(violations),
        violation_samples=tuple(violations[:5]),
        crashes=crashes,
        raw_lines=raw,
        healthz_end=healthz,
        exit_code=exit_code,
        **resource_figures(samples, duration_s),
        harness_cpu_percent=round(100 * harness_cpu, 2),
        apply_latency=Windows.of(prober.timed, duration_s),
        reconcile_pod=pod_w,
        reconcile_tiers=tiers_w,
        startup_s=startup_s,
        converge_s=converge_s,
        wall_s=round(time.monotonic() - began, 2),
        samples=tuple(samples),
    )
