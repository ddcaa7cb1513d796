"""Reporting to the API: Events on the pod, and the agent's own condition in the pod's status.

Why a thread of its own: reconciles never wait for the API server. Events go out in order; conditions
are coalesced per pod (only the latest state matters). A failed report is logged and counted, never
retried forever: the next state change reports again.

The condition goes through `pods/status` as a strategic-merge patch whose list `status.conditions` merges
by `type`: it carries only the agent's condition type, so the kubelet's conditions (Ready,
PodResizePending...) and every other status field are untouched, and the kubelet keeps conditions it
does not own when it writes the status. The patch names the pod's UID, so it cannot land on a new pod
that reuses the name. A repeated Event (same pod, reason and message) is patched (count, lastTimestamp)
instead of created again, as client-go's event correlator does.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from agent.infra.apiserver import STRATEGIC_MERGE, APIServer, path
from agent.infra.errors import is_temporary
from agent.infra.logging import get_logger
from agent.infra.metrics import Metrics
from agent.kube.errors import APIError, APINotFound, wrap

CONDITION_TYPE: Final = "kube-cgroup-agent.io/ResizeApplied"
COMPONENT: Final = "kube-cgroup-agent"

log = get_logger("agent.kube.status")


@dataclass(frozen=True, slots=True)
class PodRef:
    """The object an Event is about: a pod, or (kind, api_version given) a workload."""

    namespace: str
    name: str
    uid: str
    kind: str = "Pod"
    api_version: str = "v1"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class StatusReporter(Protocol):
    def event(self, pod: PodRef, reason: str, message: str, warning: bool = False) -> None: ...

    def condition(self, pod: PodRef, state: str, reason: str, message: str) -> None: ...

    def close(self, timeout: float = 5.0) -> None: ...


def now_rfc3339() -> str:
    """Now, as the API writes a condition's lastTransitionTime or an Event's timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_patch(pod: PodRef, status: bool, reason: str, message: str, transition: str) -> dict[str, Any]:
    """The whole strategic-merge patch body: the pod's UID as a guard, and one condition (pure)."""
    return {
        "metadata": {"uid": pod.uid},
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": "True" if status else "False",
                    "reason": reason,
                    "message": message[:1024],
                    "lastTransitionTime": transition,
                }
            ]
        },
    }


def event_body(
    pod: PodRef, reason: str, message: str, warning: bool, node: str, name: str, now: str
) -> dict[str, Any]:
    """A core/v1 Event about the pod (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": pod.namespace},
        "involvedObject": {
            "apiVersion": pod.api_version,
            "kind": pod.kind,
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


@dataclass(slots=True)
class _Sent:
    name: str
    count: int


RETRY_BASE_S: Final = 1.0
RETRY_CAP_S: Final = 30.0
RETRY_ATTEMPTS: Final = 10  # about four minutes of an API server that answers 429/5xx or not at all


class APIStatusReporter:
    """Sends events and conditions from one background thread. A report the API server refuses for a
    while (no answer, 429, 5xx) is sent again with backoff, so a Done condition is not lost to one bad
    minute; a newer condition of the same pod replaces the one waiting."""

    def __init__(
        self, api: APIServer, node: str, metrics: Metrics, clock: Callable[[], float] = time.time
    ) -> None:
        self.api = api
        self.node = node
        self.metrics = metrics
        self.clock = clock
        self._items: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._conditions: dict[str, tuple[PodRef, bool, str, str]] = {}
        self._last_status: dict[str, bool] = {}
        self._transition: dict[str, str] = {}
        self._sent: dict[tuple[str, str, str], _Sent] = {}
        self._retries: list[tuple[float, int, tuple[str, Any], int]] = []  # heap: (due, seq, item, attempt)
        self._seq = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="status-reporter", daemon=True)
        self._thread.start()

    def event(self, pod: PodRef, reason: str, message: str, warning: bool = False) -> None:
        self._items.put(("event", (pod, reason, message, warning)))

    def condition(self, pod: PodRef, state: str, reason: str, message: str) -> None:
        with self._lock:
            pending = pod.uid in self._conditions
            self._conditions[pod.uid] = (pod, state == "Done", reason, message)
        if not pending:
            self._items.put(("condition", pod.uid))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to `timeout`), then stop."""
        self._items.put(None)
        self._thread.join(timeout)

    def _next(self) -> tuple[tuple[str, Any] | None, int]:
        """The next item: a new one, or a retry that is due (whichever comes first)."""
        while True:
            timeout = max(0.0, self._retries[0][0] - time.monotonic()) if self._retries else None
            try:
                return self._items.get(timeout=timeout), 0
            except queue.Empty:
                _, _, item, attempt = heapq.heappop(self._retries)
                return item, attempt

    def _run(self) -> None:
        while True:
            item, attempt = self._next()
            if item is None:
                return
            kind, payload = item
            try:
                if kind == "event":
                    self._send_event(*payload)
                elif not self._send_condition(payload):
                    continue  # a newer condition replaced it
                self.metrics.status_reports.labels(kind, "ok").inc()
            except APIError as err:
                self.metrics.status_reports.labels(kind, "failed").inc()
                self.metrics.errors.labels(type(err).__name__).inc()
                again = is_temporary(err) and attempt + 1 < RETRY_ATTEMPTS
                log.warning("status.report_failed", kind=kind, error=str(err), retry=again, attempt=attempt + 1)
                if again:
                    delay = min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt)
                    self._seq += 1
                    heapq.heappush(self._retries, (time.monotonic() + delay, self._seq, item, attempt + 1))

    def _send_event(self, pod: PodRef, reason: str, message: str, warning: bool) -> None:
        now = now_rfc3339()
        key = (pod.uid, reason, message)
        sent = self._sent.get(key)
        if sent is not None:
            try:
                self.api.patch(
                    path("v1", "events", pod.namespace, sent.name),
                    {"count": sent.count + 1, "lastTimestamp": now},
                    STRATEGIC_MERGE,
                )
                sent.count += 1
                return
            except Exception as err:
                if not isinstance(wrap("patch event", err), APINotFound):
                    raise wrap(f"patch event {sent.name}", err) from err
        name = f"{pod.name}.{time.time_ns():x}"
        body = event_body(pod, reason, message, warning, self.node, name, now)
        try:
            self.api.create(path("v1", "events", pod.namespace), body)
        except Exception as err:
            raise wrap(f"create event {reason} for pod {pod.key}", err) from err
        self._sent[key] = _Sent(name, 1)
        if len(self._sent) > 4096:  # keep the correlator bounded: drop the oldest half
            for k in list(self._sent)[:2048]:
                del self._sent[k]

    def _send_condition(self, uid: str) -> bool:
        """Patch the pod's latest condition; False when there is none waiting (a retry superseded by a
        newer condition, which has its own item)."""
        with self._lock:
            latest = self._conditions.pop(uid, None)
        if latest is None:
            return False
        pod, ok, reason, message = latest
        if self._last_status.get(uid) != ok or uid not in self._transition:
            self._transition[uid] = now_rfc3339()
        body = condition_patch(pod, ok, reason, message, self._transition[uid])
        try:
            self.api.patch(path("v1", "pods", pod.namespace, pod.name, "status"), body, STRATEGIC_MERGE)
        except Exception as err:
            with self._lock:  # kept for the retry, unless a newer one came in meanwhile (then it is queued)
                newer = uid in self._conditions
                self._conditions.setdefault(uid, latest)
            if newer:
                return False
            raise wrap(f"patch status of pod {pod.key}", err) from err
        self._last_status[uid] = ok
        return True


class LogStatusReporter:
    """Bare nodes without an API server: the same reports, as log lines."""

    def event(self, pod: PodRef, reason: str, message: str, warning: bool = False) -> None:
        (log.warning if warning else log.info)("pod.event", pod=pod.key, reason=reason, message=message)

    def condition(self, pod: PodRef, state: str, reason: str, message: str) -> None:
        log.info(
            "pod.condition", pod=pod.key, type=CONDITION_TYPE, state=state, reason=reason, message=message
        )

    def close(self, timeout: float = 5.0) -> None:
        return None
