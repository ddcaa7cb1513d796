"""What the pod loop tells about each pass: the metrics, one log line, Events, and the pods' resize
conditions.

Why apart from the loop: passes run all the time (every pod event, every resync), so what they tell is
said when it changes, not on every pass it persists — a warning when it appears (or comes back), a
tier limit set at usage once per target it could not reach — and a pass at rest logs at debug. The
loop hands over each pass's report and the time it took; this keeps what was already said.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agent.daemon.reconciler import Outcome, Report
from agent.infra.logging import get_logger
from agent.infra.metrics import Metrics
from agent.kube.status import PodRef, StatusReporter

log = get_logger("agent.daemon")


class PassReporting:
    def __init__(self, metrics: Metrics, reporter: StatusReporter, ref: Callable[[str], PodRef | None]) -> None:
        self.metrics = metrics
        self.reporter = reporter
        self._ref = ref  # a pod's reference from its UID (None when the pod is gone)
        self._lock = threading.Lock()
        # per work item, the warnings its last pass reported: a warning is logged when it appears (or comes
        # back), not on every pass it persists (a node without hugetlb says so once, not every second)
        self._warned: dict[str, frozenset[str]] = {}
        self._shortfalls: dict[str, int] = {}  # tier memory path -> the limit it could not reach (logged)

    def forget(self, key: str) -> None:
        """The work item is gone (its pod left): its warnings are new again if it comes back."""
        self._warned.pop(key, None)

    def shortfalls(self, report: Report) -> None:
        """A tier limit set at usage: the gauge, and one warning per limit it could not reach."""
        short = {sf.path for sf in report.shortfalls}
        for sf in report.shortfalls:
            self.metrics.tier_shortfall.labels(sf.path).set(sf.set_to - sf.wanted)
            with self._lock:
                first = self._shortfalls.get(sf.path) != sf.wanted
                self._shortfalls[sf.path] = sf.wanted
            if first:
                log.warning(
                    "tier.memory_shortfall",
                    path=sf.path,
                    wanted=sf.wanted,
                    set_to=sf.set_to,
                    message="usage is above the qos-reserved limit: set at the usage, lowered on a later pass",
                )
        for path in report.changed:
            with self._lock:
                cleared = path not in short and self._shortfalls.pop(path, None) is not None
            if cleared:
                self.metrics.tier_shortfall.labels(path).set(0)
                log.info("tier.memory_converged", path=path)

    def publish(self, key: str, ref: PodRef | None, report: Report, elapsed: float) -> None:
        """One pass of work item `key` (about the pod `ref`, None for the tiers) that took `elapsed`
        seconds: metrics, drift notes, the log line, Events, and the resize conditions."""
        m = self.metrics
        m.reconcile_seconds.labels(report.scope).observe(elapsed)
        if report.writes:
            m.writes.labels("total").inc(report.writes)
        for cls, _ in report.errors:
            m.errors.labels(cls).inc()
        self.shortfalls(report)
        for note in report.drift:
            m.drift.labels(note.thing, note.action).inc()
            if note.action in ("yielded", "observed"):
                log.warning("drift." + note.action, thing=note.thing, path=note.path, message=note.message)
            elif note.action == "reapplied":
                log.info("drift.reapplied", thing=note.thing, path=note.path, reverts=note.reverts, message=note.message)
        fields: dict[str, Any] = {
            "scope": report.scope,
            "outcome": report.outcome.value,
            "writes": report.writes,
            "duration_ms": round(elapsed * 1000, 2),
        }
        if report.changed:
            fields["changed"] = list(report.changed)
        if report.errors:
            fields["errors"] = [f"{cls}: {msg}" for cls, msg in report.errors]
        current = frozenset(report.warnings)
        new = [w for w in report.warnings if w not in self._warned.get(key, frozenset())]
        if current:
            self._warned[key] = current
        else:
            self._warned.pop(key, None)
        if new:
            fields["warnings"] = new
        if report.statuses:
            fields["resize"] = {st.pod: st.state.value for st in report.statuses}
        quiet = report.outcome in (Outcome.CONVERGED, Outcome.WAITING) and not new
        (log.debug if quiet else log.warning if report.outcome is Outcome.FAILED else log.info)("reconcile", **fields)
        for event in report.events:
            target = self._ref(event.uid) if event.uid else ref
            if target is not None and target.uid:
                self.reporter.event(target, event.reason, event.message, event.warning)
        for status in report.statuses:
            target = self._ref(status.uid)
            if target is not None and target.uid:
                message = f"{status.reason}: {status.message}" if status.message else status.reason
                self.reporter.condition(target, status.state.value, status.state.value, message)
