"""What happens to a workload's pods while something runs, from a watch (not from polling, which misses
the short moments a rollout is made of): the most pods unavailable at once, the order pods reached a
revision, the pods deleted, the containers that restarted. Used by the rollout, upgrade and fault tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config, watch

from tests.e2e_k8s.nodes import RK, kubectl


def api_requests() -> float:
    """Every request the API server has served so far but watches (apiserver_request_total)."""
    total = 0.0
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        if line.startswith("apiserver_request_total{") and 'verb="WATCH"' not in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


GATE = "kube-cgroup-agent.io/InPlaceUpdateReady"


def new_revision(name: str, seen: tuple[str, ...] = (), namespace: str = "default") -> str | None:
    """The StatefulSet's update revision once it differs from its current one and from `seen`."""
    st = json.loads(kubectl("get", "sts", name, "-n", namespace, "-o", "json")).get("status") or {}
    rev = st.get("updateRevision")
    return str(rev) if rev and rev != st.get("currentRevision") and rev not in seen else None


def gate(pod: dict[str, Any]) -> bool | None:
    """The agent's readiness gate condition: False while the agent updates the pod (None: not set)."""
    got = [c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == GATE]
    return got[0] if got else None


def runs(pod: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Each container's (containerID, restartCount): a new ID is a new container."""
    return {c["name"]: (c.get("containerID", ""), int(c["restartCount"]))
            for c in (pod.get("status") or {}).get("containerStatuses") or []}


@dataclass(frozen=True)
class PodView:
    name: str
    uid: str
    node: str
    revision: str
    ready: bool
    terminating: bool
    runs: dict[str, tuple[str, int]]
    gate: bool | None = None


@dataclass
class Seen:
    """What the watch saw (read it after `PodWatch.stop`)."""

    max_unavailable: int = 0
    when_max: float = 0.0
    max_updating: int = 0  # pods the agents had taken out at once (their gate False, or being deleted)
    reached: list[tuple[str, str, str]] = field(default_factory=list)  # (revision, pod, node), first time each
    reached_at: dict[tuple[str, str], float] = field(default_factory=dict)  # (revision, pod): when (monotonic)
    deleted: list[str] = field(default_factory=list)  # pod names whose object was deleted (DELETED events)
    restarted: set[tuple[str, str]] = field(default_factory=set)  # (pod, container) run anew, same pod UID
    events: int = 0
    errors: int = 0  # the watch broke and was opened again (the API server away, a 410)
    timeline: list[str] = field(default_factory=list)  # one line per event, for the message of a failure

    def around_max(self, lines: int = 12) -> str:
        """The events up to the moment the most pods were unavailable."""
        end = next((i for i, line in enumerate(self.timeline) if line.startswith(f"[{self.max_unavailable} ")), len(self.timeline))
        return "\n".join(self.timeline[max(0, end - lines):end + 2])


class PodWatch:
    """The pods of `namespace` matching `selector`, watched in a thread. `unavailable(pods)` says how many
    of the workload's pods count as unavailable in a state (a StatefulSet: ordinals missing or not
    Ready; a DaemonSet: nodes without a Ready pod); its maximum over every state seen is kept."""

    def __init__(self, namespace: str, selector: str, unavailable: Callable[[dict[str, PodView]], int]) -> None:
        config.load_kube_config(str(RK / "kubeconfig"))
        self.core = client.CoreV1Api()
        self.namespace, self.selector, self._unavailable = namespace, selector, unavailable
        self.pods: dict[str, PodView] = {}
        self.seen = Seen()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodWatch:
        self._relist()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> Seen:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.seen

    def snapshot(self) -> dict[str, PodView]:
        with self._lock:
            return dict(self.pods)

    def _relist(self) -> str:
        got = self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(self.namespace, label_selector=self.selector))
        with self._lock:
            listed = {raw["metadata"]["name"]: raw["metadata"]["uid"] for raw in got["items"]}
            # gone, or another pod of that name, while the watch was away: deleted all the same
            self.seen.deleted.extend(n for n, p in self.pods.items() if listed.get(n) != p.uid)
            self.pods = {n: p for n, p in self.pods.items() if listed.get(n) == p.uid}
            for raw in got["items"]:
                self._apply("LISTED", raw, count=False)  # a list is one state, not one per pod
            self._count("LISTED", "")
        return str(got["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                rv = rv or self._relist()
                w = watch.Watch()
                for event in w.stream(self.core.list_namespaced_pod, self.namespace, label_selector=self.selector,
                                      resource_version=rv, timeout_seconds=5, allow_watch_bookmarks=False):
                    raw = self.core.api_client.sanitize_for_serialization(event["object"])
                    rv = str(raw["metadata"]["resourceVersion"])
                    with self._lock:
                        self._apply(event["type"], raw)
                    if self._stop.is_set():
                        w.stop()
            except Exception:  # the API server away or the watch expired: open it again from a new list
                self.seen.errors += 1
                rv = ""
                self._stop.wait(0.5)

    def _apply(self, kind: str, raw: dict[str, Any], count: bool = True) -> None:
        meta = raw["metadata"]
        name = meta["name"]
        before = self.pods.get(name)
        if kind == "DELETED":
            self.pods.pop(name, None)
            self.seen.deleted.append(name)
        else:
            view = PodView(name, meta["uid"], (raw.get("spec") or {}).get("nodeName") or "",
                           (meta.get("labels") or {}).get("controller-revision-hash", ""), ready(raw),
                           bool(meta.get("deletionTimestamp")), runs(raw), gate(raw))
            self.pods[name] = view
            if not any(r == view.revision and p == name for r, p, _ in self.seen.reached):
                self.seen.reached.append((view.revision, name, view.node))
                self.seen.reached_at[(view.revision, name)] = time.monotonic()
            if before is not None and before.uid == view.uid:
                for c, (cid, restarts) in view.runs.items():
                    old = before.runs.get(c)
                    if old is not None and old[0] and (cid != old[0] or restarts != old[1]):
                        self.seen.restarted.add((name, c))
        if count:
            self._count(kind, name)

    def _count(self, kind: str, name: str) -> None:
        self.seen.events += 1
        n = self._unavailable(self.pods)
        p = self.pods.get(name)
        self.seen.timeline.append(f"[{n} unavailable] {time.monotonic():.1f} {kind} {name}" + (
            f" ready={p.ready} gate={p.gate} rev={p.revision} terminating={p.terminating} runs={p.runs}" if p else ""))
        if n > self.seen.max_unavailable:
            self.seen.max_unavailable, self.seen.when_max = n, time.monotonic()
        self.seen.max_updating = max(self.seen.max_updating,
                                     sum(1 for v in self.pods.values() if v.gate is False or v.terminating))


def statefulset_unavailable(name: str, replicas: int) -> Callable[[dict[str, PodView]], int]:
    """A StatefulSet's ordinals missing, terminating or not Ready."""
    def count(pods: dict[str, PodView]) -> int:
        return sum(1 for i in range(replicas)
                   if (p := pods.get(f"{name}-{i}")) is None or not p.ready or p.terminating)
    return count


def daemonset_unavailable(nodes: tuple[str, ...]) -> Callable[[dict[str, PodView]], int]:
    """A DaemonSet's nodes without a Ready pod that is not terminating."""
    def count(pods: dict[str, PodView]) -> int:
        return sum(1 for n in nodes if not any(p.node == n and p.ready and not p.terminating for p in pods.values()))
    return count
