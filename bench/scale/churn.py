"""The churn of the big cluster around the agents' nodes, written with the admin's client at a set rate:
every ReplicaSet, StatefulSet, DaemonSet and LimitRange updated, every VPA's status rewritten as VPA's
recommender does each minute, some Deployments rolled out (a new ReplicaSet, the oldest one deleted),
some VPAs deleted and created again, some pods elsewhere replaced, and Events. `changes` counts the
writes of the kinds the agents watch (each one a watch event for whoever watches that kind); the pods
elsewhere and the Events are counted apart (no agent watches them)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.scale.api import MERGE, Client, in_parallel, url_of
from bench.scale.cluster import Loader
from bench.scale.objects import (
    containers_of,
    pod_ip,
    pod_status,
    replicaset,
    short_hash,
    upstream_recommends,
    vpa_status,
)
from bench.scale.scenario import Elsewhere

WATCHED = ("ReplicaSet", "VerticalPodAutoscaler", "StatefulSet", "DaemonSet", "LimitRange")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Counts:
    changes: int = 0  # writes of the kinds an agent watches
    pods: int = 0  # writes of pods elsewhere
    events: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, changes: int = 0, pods: int = 0, events: int = 0) -> None:
        with self.lock:
            self.changes += changes
            self.pods += pods
            self.events += events


def recommendation(obj: dict[str, Any], k: int) -> dict[str, Any]:
    """Round k's recommendation for a VPA elsewhere: the target moves a little every minute."""
    cpu = 100 + (int(short_hash(obj["metadata"]["namespace"], obj["metadata"]["name"]), 16) % 400) + 10 * (k % 5)
    return vpa_status(("app",), cpu, 256 + 16 * (k % 3), now_iso())


class Cluster:
    """The live objects elsewhere, as the churn changes them."""

    def __init__(self, client: Client, loader: Loader, counts: Counts) -> None:
        self.client = client
        self.loader = loader
        self.counts = counts
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.revisions: dict[tuple[str, str], list[dict[str, Any]]] = {}  # Deployment -> its ReplicaSets, oldest first

    def add(self, els: Elsewhere, created: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        for o in created:
            m = o["metadata"]
            kind = o.get("kind") or ""
            self.objects[(kind, m.get("namespace", ""), m["name"])] = o
            if kind == "ReplicaSet":
                ref = m["ownerReferences"][0]["name"]
                self.revisions.setdefault((m["namespace"], ref), []).append(o)
        self.pods += pods

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in self.objects.items() if k == kind]

    def upstream_vpas(self) -> list[dict[str, Any]]:
        """The VPAs whose status VPA's own recommender writes (not those naming another recommender)."""
        return [o for o in self.of("VerticalPodAutoscaler") if upstream_recommends(o)]


class Churn:
    def __init__(self, cluster: Cluster, rate_per_s: float, threads: int = 4) -> None:
        self.cluster = cluster
        self.client = cluster.client
        self.counts = cluster.counts
        self.rate = rate_per_s
        self.threads = threads

    # ---- one change each ----

    def _patch(self, obj: dict[str, Any], body: Any, sub: str = "") -> None:
        """One change; an object the same round already deleted (a rollout's oldest ReplicaSet) is skipped."""
        out = self.client.call("PATCH", url_of(obj, sub), body, MERGE, ok=(404,))
        if out.get("kind") != "Status":
            self.counts.add(changes=1)

    def _annotate(self, obj: dict[str, Any], k: int) -> None:
        self._patch(obj, {"metadata": {"annotations": {"kcg-scale/round": str(k)}}})

    def _limits(self, obj: dict[str, Any], k: int) -> None:
        limits = obj["spec"]["limits"]
        limits[0]["max"]["cpu"] = str(4 + k % 2)
        self._patch(obj, {"spec": {"limits": limits}})

    def recommend(self, obj: dict[str, Any], k: int) -> None:
        self._patch(obj, recommendation(obj, k), "status")

    def _roll(self, deploy: tuple[str, str], k: int) -> None:
        """A Deployment's new revision: its ReplicaSet created, the oldest one deleted."""
        history = self.cluster.revisions[deploy]
        ns, name = deploy
        d = int(name.rsplit("-", 1)[1])
        revision = int(history[-1]["metadata"]["annotations"]["deployment.kubernetes.io/revision"]) + 1
        created = self.cluster.loader.create_one(replicaset(name, ns, d, "elsewhere", revision, 2))
        history.append(created)
        old = history.pop(0)
        self.client.delete(old)
        self.cluster.objects.pop(("ReplicaSet", ns, old["metadata"]["name"]), None)
        self.cluster.objects[("ReplicaSet", ns, created["metadata"]["name"])] = created
        self.counts.add(changes=2)

    def _recreate(self, obj: dict[str, Any], k: int) -> None:
        self.client.delete(obj)
        body = {k2: v for k2, v in obj.items() if k2 != "status"}
        body["metadata"] = {key: obj["metadata"][key] for key in ("name", "namespace", "labels", "annotations")
                            if key in obj["metadata"]}
        created = self.client.create(body)
        self.cluster.objects[(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])] = {**created, "kind": obj["kind"]}
        self.counts.add(changes=2)

    def _replace_pod(self, i: int, k: int) -> None:
        p = self.cluster.pods[i]
        # gone at once, as the kubelet confirms a pod's end (else the name stays taken for its grace period)
        self.client.call("DELETE", url_of(p) + "?gracePeriodSeconds=0", ok=(404,))
        body = {"apiVersion": "v1", "kind": "Pod", "spec": p["spec"],
                "metadata": {key: p["metadata"][key] for key in ("name", "namespace", "labels", "annotations", "ownerReferences")
                             if key in p["metadata"]}}
        for _ in range(50):  # the name is free once the deletion is done (no kubelet: immediately)
            created = self.client.call("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", body, ok=(409,))
            if created.get("kind") == "Pod":
                break
            time.sleep(0.05)
        else:
            return
        self.cluster.pods[i] = self.client.patch(created, pod_status(created, now_iso(), pod_ip(900_000 + i)), "status", MERGE)
        self.counts.add(pods=3)

    def _event(self, n: int, k: int) -> None:
        ns = f"app-{n % 20:04d}"
        t = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.client.call("POST", f"/api/v1/namespaces/{ns}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"scale.{k}.{n}.{short_hash(k, n)}", "namespace": ns},
            "involvedObject": {"kind": "ReplicaSet", "namespace": ns, "name": f"web-{n:05d}"},
            "reason": "SuccessfulCreate", "message": f"Created pod: web-{n:05d}-x", "type": "Normal",
            "source": {"component": "replicaset-controller"}, "firstTimestamp": t[:19] + "Z", "lastTimestamp": t[:19] + "Z",
            "count": 1, "reportingComponent": "replicaset-controller", "reportingInstance": ""})
        self.counts.add(events=1)

    # ---- a round ----

    def plan(self, k: int, vpas: bool = True) -> list[Callable[[], None]]:
        c = self.cluster
        ops: list[Callable[[], None]] = []
        for kind in ("ReplicaSet", "StatefulSet", "DaemonSet"):
            ops += [lambda o=o: self._annotate(o, k) for o in c.of(kind)]
        ops += [lambda o=o: self._limits(o, k) for o in c.of("LimitRange")]
        if vpas:
            ops += [lambda o=o: self.recommend(o, k) for o in c.upstream_vpas()]
        deploys = sorted(c.revisions)
        ops += [lambda d=d: self._roll(d, k) for d in deploys[k % 20::20]]  # 5 % of them
        ops += [lambda o=o: self._recreate(o, k) for o in c.of("VerticalPodAutoscaler")[k % 33::33]]
        ops += [lambda i=i: self._replace_pod(i, k) for i in range(k % 10, len(c.pods), 10)]
        n_events = max(1, len(ops) // 20)
        ops += [lambda n=n: self._event(n, k) for n in range(n_events)]
        # interleaved, so that every stretch of the round has every kind
        order = sorted(range(len(ops)), key=lambda i: (i * 7919) % len(ops))
        return [ops[i] for i in order]

    def run(self, ops: list[Callable[[], None]], stop: threading.Event | None = None) -> float:
        """Run the operations at `rate` a second; returns the seconds it took."""
        t0 = time.monotonic()
        period = 1.0 / self.rate

        def one(item: tuple[int, Callable[[], None]]) -> None:
            i, op = item
            if stop is not None and stop.is_set():
                return
            delay = t0 + i * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            op()

        in_parallel(one, list(enumerate(ops)), self.threads)
        return time.monotonic() - t0


class Recommender(threading.Thread):
    """VPA's recommender elsewhere: every VPA's status rewritten once a minute (spread over the minute), but
    those of VPAs that name another recommender (kube-cgroup-agent's), which VPA's recommender skips."""

    def __init__(self, churn: Churn, period_s: float = 60.0) -> None:
        super().__init__(name="recommender", daemon=True)
        self.churn = churn
        self.period = period_s
        self.stop = threading.Event()
        self.rounds = 0

    def run(self) -> None:
        k = 1000
        while not self.stop.is_set():
            vpas = self.churn.cluster.upstream_vpas()
            t0 = time.monotonic()
            for i, o in enumerate(vpas):
                if self.stop.wait(max(0.0, t0 + i * self.period / max(1, len(vpas)) - time.monotonic())):
                    return
                with contextlib.suppress(RuntimeError):
                    self.churn.recommend(o, k)
            self.rounds += 1
            k += 1


def containers(obj: dict[str, Any]) -> tuple[str, ...]:
    return containers_of(obj["spec"]["template"])
