# ruff: noqa: E402  (the imports after `without_optional_imports()`, which must come before structlog's)
"""The daemon process of figures 5 and 6: `python -m bench.daemon_child CONFIG.json PODS.json [--watch-tiers]`.

It wires the daemon exactly as `agent.daemon.run` does (environment, ownership, CRI client, reconciler
selection, Daemon, metrics and probe endpoints) except for the pod source: a push source standing in for
the API watch (which hands each pod event to `sink.upsert`) reads one pod per stdin line. So the latency
measured is the daemon's own, from an event reaching it to the pod's cgroups and containers being
updated (and to the QoS tiers being updated), without the API server or a manifest poll interval.

stdout, one JSON object per line: {"progress": passes, "at": s} every 5 s until {"ready": s, ...} says
the first full pass is done; then per event
{"uid", "pod_s"} when the pod's pass applied it and {"uid", "tiers_s"} when a tiers pass that started
after the event finished. An empty line or EOF on stdin stops the daemon.

Figure 6 (`--watch-tiers`): a stdin line may also be {"pod": POD, "expect": {tier memory file: bytes}}.
Every cgroup write then goes through `WatchedFiles`, and after each write to one of those files and at
the end of every pass the files are read back (page-rounded, as the kernel stores them); the first time
all of them show the expected values, {"uid", "tiers_current_s", "by", "pass", ...} is printed, and once
the event's own pod pass and a tiers pass that started after it are both done,
{"uid", "watch_done": true, ...} (with "reverted": how often the files left those values again).
"""

from __future__ import annotations

from agent.infra.lean import without_optional_imports

without_optional_imports()  # as `kube-cgroup-agent run` does, before structlog is first imported

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent import pipeline
from agent.config.settings import from_mapping
from agent.core.model import PodUID, PodView
from agent.core.ownership import resolve
from agent.daemon import select_reconciler
from agent.daemon.core import Daemon
from agent.daemon.heap import fewer_arenas
from agent.daemon.reconciler import Outcome, Reconciler, Report, StopRequested
from agent.infra.logging import configure
from agent.infra.metrics import Endpoints, Metrics, Probe
from agent.kube.status import LogStatusReporter
from agent.kube.watch import PodSink
from agent.resize.types import ResizeStatus
from cgroupfs.convert import page_round
from cgroupfs.files import CgroupFiles

_out_lock = threading.Lock()


def emit(**fields: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


Reader = Callable[[str], "str | None"]


def reads_as(text: str | None, expected: int) -> bool:
    """A memory limit file shows `expected` as the kernel stores it (whole pages)."""
    if text is None:
        return False
    try:
        return page_round(int(text.strip())) == page_round(expected)
    except ValueError:
        return False


@dataclass
class _Pass:
    kind: str  # "pod" or "tiers"
    uid: str | None  # the pod of a pod pass
    ordinal: int  # passes started since the daemon began, this one included


@dataclass
class TierWatch:
    """One resize event of figure 6: when the tier files it moves first read back at their new values,
    in which pass, and whether they ever left those values again before the event's passes were done."""

    uid: str
    at: float  # when the event was handed to the daemon
    expect: dict[str, int]  # tier memory file (relative path) -> bytes
    before: int  # passes started before the event
    current_s: float | None = None
    by: str | None = None  # "own pod pass", "tiers pass", "another pod's pass"
    pass_no: int | None = None  # 1 = the first pass started after the event
    pod_done_s: float | None = None  # the event's own pod pass finished (applied or converged)
    tiers_done: bool = False  # a tiers pass started after the event finished
    passes: list[str] = field(default_factory=list)  # passes finished since the event, in order
    reverted: int = 0
    showing: bool = False

    def describe(self, current: _Pass | None) -> tuple[str, int | None]:
        if current is None:
            return "outside any pass", None
        if current.kind == "tiers":
            who = "tiers pass"
        elif current.uid == self.uid:
            who = "own pod pass"
        else:
            who = "another pod's pass"
        return who, current.ordinal - self.before

    def check(self, read: Reader, current: _Pass | None, now: Callable[[], float]) -> dict[str, Any] | None:
        """Read the files back; the line to print when they show the new values for the first time."""
        ok = all(reads_as(read(path), value) for path, value in self.expect.items())
        at = now()
        if ok and not self.showing and self.current_s is None:
            self.showing = True
            self.current_s = at - self.at
            self.by, self.pass_no = self.describe(current)
            return {"uid": self.uid, "tiers_current_s": self.current_s, "by": self.by, "pass": self.pass_no}
        if ok != self.showing:
            self.showing = ok
            if not ok:
                self.reverted += 1
        return None

    def finished(self, p: _Pass, applied: bool, at: float) -> None:
        self.passes.append(p.kind if p.uid != self.uid else "own pod")
        if p.kind == "pod" and p.uid == self.uid and applied:
            self.pod_done_s = at - self.at
        elif p.kind == "tiers":
            self.tiers_done = True

    def done(self) -> bool:
        return self.current_s is not None and self.pod_done_s is not None and self.tiers_done

    def summary(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "watch_done": True,
            "tiers_current_s": self.current_s,
            "by": self.by,
            "pass": self.pass_no,
            "pod_applied_s": self.pod_done_s,
            "passes": self.passes,
            "reverted": self.reverted,
            "current_at_end": self.showing,
        }


class Timed:
    """The selected reconciler, reporting when a pushed event's pod and tiers passes are done (and, for
    figure 6, when the QoS tier files it moves read back at their new values)."""

    def __init__(self, inner: Reconciler, read: Reader | None = None) -> None:
        self.inner = inner
        self.events: dict[str, float] = {}  # uid -> when its event was pushed
        self.tiers_due: dict[str, float] = {}
        self.passes = 0
        self.started = 0
        self.lock = threading.Lock()
        self.read = read
        self.watches: dict[str, TierWatch] = {}
        self.watched: set[str] = set()  # every file some watch expects
        self.local = threading.local()  # the pass running in this thread

    def pushed(self, uid: str, at: float) -> None:
        with self.lock:
            self.events[uid] = at
            self.tiers_due[uid] = at

    def watch(self, uid: str, at: float, expect: Mapping[str, int]) -> None:
        with self.lock:
            self.watches[uid] = TierWatch(uid, at, dict(expect), self.started)
            self.watched = {p for w in self.watches.values() for p in w.expect}

    def wrote(self, relpath: str) -> None:
        """A cgroup file was written: read the watched tier files back right away."""
        if relpath in self.watched:
            self._check(lambda w: relpath in w.expect)

    def _check(self, which: Callable[[TierWatch], bool]) -> None:
        if self.read is None:
            return
        current: _Pass | None = getattr(self.local, "current", None)
        lines = []
        with self.lock:
            for w in self.watches.values():
                if which(w) and (current is None or current.ordinal > w.before):
                    line = w.check(self.read, current, time.perf_counter)
                    if line is not None:
                        lines.append(line)
        for line in lines:
            emit(**line)

    def _begin(self, kind: str, uid: str | None) -> _Pass:
        with self.lock:
            self.started += 1
            p = _Pass(kind, uid, self.started)
        self.local.current = p
        return p

    def _end(self, p: _Pass, applied: bool) -> None:
        if self.watches:
            self._check(lambda w: True)  # whatever wrote them, the end of a pass reads them back too
        self.local.current = None
        at = time.perf_counter()
        finished = []
        with self.lock:
            for w in list(self.watches.values()):
                if p.ordinal > w.before:
                    w.finished(p, applied, at)
                    if w.done():
                        finished.append(self.watches.pop(w.uid))
            if finished:
                self.watched = {q for w in self.watches.values() for q in w.expect}
        for w in finished:
            emit(**w.summary())

    def start(self, pods: Sequence[PodView]) -> list[str]:
        return self.inner.start(pods)

    def reconcile_pod(self, pod: PodView, stop: StopRequested) -> Report:
        p = self._begin("pod", pod.uid)
        report = self.inner.reconcile_pod(pod, stop)
        done = time.perf_counter()
        with self.lock:
            self.passes += 1
            at = self.events.pop(pod.uid, None) if report.outcome is Outcome.APPLIED else None
        if at is not None:
            emit(uid=pod.uid, pod_s=done - at, writes=report.writes)
        self._end(p, report.outcome in (Outcome.APPLIED, Outcome.CONVERGED))
        return report

    def reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        p = self._begin("tiers", None)
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
        self._end(p, True)
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
    """The node's pods as one list, then one pod update per stdin line (like watch events). The list is
    let go once handed over, as the API watch lets go of its list: the daemon's RSS is the daemon's."""

    def __init__(self, pods: list[Mapping[str, Any]], timed: Timed) -> None:
        self.pods = pods
        self.timed = timed

    def run(self, sink: PodSink, stop: threading.Event) -> None:
        pods, self.pods = self.pods, []
        sink.snapshot(pods)
        del pods
        for line in sys.stdin:
            if not line.strip():
                break
            raw = json.loads(line)
            expect = None
            if "pod" in raw and "expect" in raw:  # figure 6: the tier files this event moves
                raw, expect = raw["pod"], raw["expect"]
            at = time.perf_counter()
            if expect is not None:
                self.timed.watch(raw["metadata"]["uid"], at, expect)
            self.timed.pushed(raw["metadata"]["uid"], at)
            sink.upsert(raw)
        stop.set()

    def interrupt(self) -> None:
        return None


class WatchedFiles(CgroupFiles):
    """The daemon's `CgroupFiles`, telling figure 6's watch about every successful write."""

    def __init__(self, files: CgroupFiles) -> None:
        super().__init__(files.cgroupfs, files.owned_roots)
        self.on_write: Callable[[str], None] = lambda relpath: None

    def write(self, relpath: str, value: str) -> None:
        super().write(relpath, value)
        self.on_write(relpath)


def main(argv: list[str]) -> int:
    config, pods_file = json.loads(Path(argv[0]).read_text()), Path(argv[1])
    watch_tiers = "--watch-tiers" in argv[2:]
    settings = from_mapping(config)
    configure(settings.log_format, settings.log_level, sys.stderr)  # stdout carries the measurements
    fewer_arenas()  # as agent.daemon.run does, before any thread
    t0 = time.perf_counter()
    env = pipeline.environment(settings)
    ownership = resolve(settings.ownership, settings.kubelet_version, settings.feature_gates)
    from agent.cri.client import CRIClient

    watched = WatchedFiles(env.files) if watch_tiers else None
    if watched is not None:
        env = replace(env, files=watched)
    reconciler = select_reconciler(settings, env, ownership, CRIClient(settings.cri_endpoint or ""))
    timed = Timed(reconciler, watched.read if watched is not None else None)
    if watched is not None:
        watched.on_write = timed.wrote
    metrics = Metrics()
    daemon = Daemon(
        timed,
        PushSource(json.loads(pods_file.read_text())["items"], timed),
        LogStatusReporter(),
        metrics,
        node=None,
        resync_period_s=settings.resync_period_s,
        workers=settings.workers,
        keep_raw=False,  # as `run` without components
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
            daemon.stop.wait()  # measured from here on: the daemon alone, not this loop's polling
            break
        elif quiet < 5 and ticks % 50 == 0:  # still on the first pass: how far it got
            emit(progress=timed.passes, at=time.perf_counter() - t0)
    daemon.shutdown()
    endpoints.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
