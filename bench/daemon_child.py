"""The daemon process of figure 5: `python -m bench.daemon_child CONFIG.json PODS.json`.

It wires the daemon exactly as `agent.daemon.run` does (environment, ownership, CRI client, reconciler
selection, Daemon, metrics and probe endpoints) except for the pod source: a push source standing in for
the API watch (which hands each pod event to `sink.upsert`) reads one pod per stdin line. So the latency
measured is the daemon's own, from an event reaching it to the pod's cgroups and containers being
updated (and to the QoS tiers being updated), without the API server or a manifest poll interval.

stdout, one JSON object per line: {"progress": passes, "at": s} every 5 s until {"ready": s, ...} says
the first full pass is done; then per event
{"uid", "pod_s"} when the pod's pass applied it and {"uid", "tiers_s"} when a tiers pass that started
after the event finished. An empty line or EOF on stdin stops the daemon.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent import pipeline
from agent.daemon import select_reconciler
from agent.daemon.core import Daemon
from agent.daemon.ownership import resolve
from agent.daemon.reconciler import Outcome, Reconciler, Report, StopRequested
from agent.kube.status import LogStatusReporter
from agent.kube.watch import PodSink
from agent.logging import configure
from agent.metrics import Endpoints, Metrics, Probe
from agent.model import PodUID, PodView
from agent.resize.types import ResizeStatus
from agent.settings import from_mapping

_out_lock = threading.Lock()


def emit(**fields: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


class Timed:
    """The selected reconciler, reporting when a pushed event's pod and tiers passes are done."""

    def __init__(self, inner: Reconciler) -> None:
        self.inner = inner
        self.events: dict[str, float] = {}  # uid -> when its event was pushed
        self.tiers_due: dict[str, float] = {}
        self.passes = 0
        self.lock = threading.Lock()

    def pushed(self, uid: str, at: float) -> None:
        with self.lock:
            self.events[uid] = at
            self.tiers_due[uid] = at

    def start(self, pods: Sequence[PodView]) -> list[str]:
        return self.inner.start(pods)

    def reconcile_pod(self, pod: PodView, stop: StopRequested) -> Report:
        report = self.inner.reconcile_pod(pod, stop)
        done = time.perf_counter()
        with self.lock:
            self.passes += 1
            at = self.events.pop(pod.uid, None) if report.outcome is Outcome.APPLIED else None
        if at is not None:
            emit(uid=pod.uid, pod_s=done - at, writes=report.writes)
        return report

    def reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        started = time.perf_counter()
        report = self.inner.reconcile_tiers(pods, stop)
        done = time.perf_counter()
        with self.lock:
            self.passes += 1
            due = {uid: at for uid, at in self.tiers_due.items() if at <= started}
            for uid in due:
                del self.tiers_due[uid]
        for uid, at in due.items():
            emit(uid=uid, tiers_s=done - at, writes=report.writes)
        return report

    def forget_pod(self, uid: PodUID) -> None:
        self.inner.forget_pod(uid)

    def status(self, uid: PodUID) -> ResizeStatus | None:
        return self.inner.status(uid)

    def states(self) -> dict[str, int]:
        return self.inner.states()

    def flush(self) -> None:
        self.inner.flush()

    def stale(self, pods: Sequence[PodView]) -> set[str]:
        return self.inner.stale(pods)


class PushSource:
    """The node's pods as one list, then one pod update per stdin line (like watch events)."""

    def __init__(self, pods: list[Mapping[str, Any]], timed: Timed) -> None:
        self.pods = pods
        self.timed = timed

    def run(self, sink: PodSink, stop: threading.Event) -> None:
        sink.snapshot(self.pods)
        for line in sys.stdin:
            if not line.strip():
                break
            raw = json.loads(line)
            self.timed.pushed(raw["metadata"]["uid"], time.perf_counter())
            sink.upsert(raw)
        stop.set()

    def interrupt(self) -> None:
        return None


def main(argv: list[str]) -> int:
    config, pods_file = json.loads(Path(argv[0]).read_text()), Path(argv[1])
    settings = from_mapping(config)
    configure(settings.log_format, settings.log_level, sys.stderr)  # stdout carries the measurements
    t0 = time.perf_counter()
    env = pipeline.environment(settings)
    ownership = resolve(settings.ownership, settings.kubelet_version, settings.feature_gates)
    from agent.cri.client import CRIClient

    timed = Timed(select_reconciler(settings, env, ownership, CRIClient(settings.cri_endpoint or "")))
    pods = json.loads(pods_file.read_text())["items"]
    metrics = Metrics()
    daemon = Daemon(
        timed,
        PushSource(pods, timed),
        LogStatusReporter(),
        metrics,
        node=None,
        resync_period_s=settings.resync_period_s,
        workers=settings.workers,
    )
    endpoints = Endpoints(
        metrics, Probe(daemon.healthy, daemon.ready), settings.metrics_bind_address, settings.health_bind_address
    )
    daemon.start()
    quiet = ticks = 0
    while not daemon.stop.wait(0.1):
        ticks += 1
        idle = daemon.ready()[0] and len(daemon.queue) == 0
        quiet = quiet + 1 if idle else 0
        if quiet == 5:  # half a second with nothing queued after the tiers were done once
            emit(ready=time.perf_counter() - t0 - 0.5, passes=timed.passes)
        elif quiet < 5 and ticks % 50 == 0:  # still on the first pass: how far it got
            emit(progress=timed.passes, at=time.perf_counter() - t0)
    daemon.shutdown()
    endpoints.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
