"""The keeper: watches VPAs, their workloads, LimitRanges and its own parameter objects, and writes what
agent.vpa.admission_cluster says the cluster should hold (one Deployment replica, off the pods' critical path:
when it is down, the policy keeps reading the objects as they last were, as VPA's webhook falls back to
the recommendation cached in the VPA object).

It also labels every VPA with its target (`kube-cgroup-agent.io/target`, agent.vpa.target), the label each
node's agent watches VPAs by: the one place that reads every VPA of the cluster hands each node only the
VPAs of its own pods, filtered by the API server. At most LABELS_PER_PASS labels a pass, so that a first
start in a cluster of ten thousand VPAs spreads its writes.

Nothing is written or deleted while the VPAs, the LimitRanges or the parameters are not known as they are
now (before the first list: an empty view would delete every object; a watch failing: a VPA deleted
meanwhile would be written again); a workload kind not known now leaves its VPAs' objects as they are. A write that fails is tried again at the next pass (at the latest after `resync_s`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from agent.daemon.objects import ObjectCache, Threads
from agent.infra.apiserver import MERGE_PATCH, APIServer, path
from agent.infra.logging import get_logger
from agent.infra.metrics import KeeperMetrics
from agent.kube.errors import APIError, APINotFound, wrap
from agent.kube.trim import without_managed_fields
from agent.vpa.admission import GROUP, PARAMS_LABEL, PLURAL, VERSION
from agent.vpa.admission_cluster import (
    TARGETS,
    Desired,
    Key,
    desired,
    differs,
    only_targets_moved,
    targets_within,
    trimmer,
)
from agent.vpa.policy import Options
from agent.vpa.target import TARGET_LABEL, label_of, wanted_value

log = get_logger("agent.daemon.vpa_admission")

FIELD_MANAGER: Final = "kube-cgroup-agent-vpa-admission"
APPLY_PATCH: Final = "application/apply-patch+yaml"
PARAMS_VERSION: Final = f"{GROUP}/{VERSION}"
VPA_VERSION: Final = "autoscaling.k8s.io/v1"
LABELS_PER_PASS: Final = 100
# A namespace's parameters whose only change is a new recommendation are written at most this often: the
# recommender rewrites every VPA's status about once a minute, and at 10,000 VPAs writing each would be
# ~170 writes a second; the policy sets a new pod from a recommendation at most this much older.
TARGETS_EVERY_S: Final = 300.0
TARGETS_MIN_CHANGE: Final = 0.10  # a new recommendation within this of the one written is not written (targets_within)


class _Listed(ObjectCache):
    """An object cache that knows whether it can be trusted: its first list has answered and its watch is
    not behind (a watch that fails before it delivers anything, as when the VPA CRD is removed, leaves the
    cache holding objects that may be gone)."""

    def __init__(
        self,
        noun: str,
        changed: Callable[[], None],
        keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = without_managed_fields,
    ) -> None:
        super().__init__(changed, keep)
        self.noun = noun
        self.listed = threading.Event()
        self.behind_since: str | None = None  # why the watch is behind, None when it is current

    @property
    def current(self) -> bool:
        return self.listed.is_set() and self.behind_since is None

    def snapshot(self, objs: list[Mapping[str, Any]]) -> None:
        self.listed.set()
        self.behind_since = None
        super().snapshot(objs)

    def behind(self, reason: str | None) -> None:
        was, self.behind_since = self.behind_since, reason
        if reason is None and was is not None:
            self.changed()


class Keeper:
    """`healthy` and `readiness` are the keeper's /healthz and /readyz: alive while all its threads run and
    its pass loop turns (it wakes every `resync_s` at the latest; a write that hangs is cut at 40 s), ready
    once it knows the cluster as it is now and has made its first pass."""

    def __init__(
        self,
        api: APIServer,
        metrics: KeeperMetrics,
        opts: Options,
        resync_s: float = 60.0,
        settle_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        targets_every_s: float = TARGETS_EVERY_S,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.opts = opts
        self.resync_s = resync_s
        self.settle_s = settle_s
        self.clock = clock
        self.stuck_after_s = 3 * resync_s + 120.0
        self._turned = clock()  # the pass loop's last sign of life
        self.dirty = threading.Event()
        self.vpas = _Listed("VerticalPodAutoscalers", self.dirty.set)
        self.limit_ranges = _Listed("LimitRanges", self.dirty.set)
        self.params = _Listed("VPAAdmissionParams", self.dirty.set)
        self.workloads = {kind: _Listed(TARGETS[kind][1], self.dirty.set, trimmer(kind)) for kind in TARGETS}
        self.threads = Threads(metrics)
        self.targets_every_s = targets_every_s
        self._written: dict[Key, float] = {}  # a namespace's parameters -> when the keeper last wrote them
        self._problems: set[str] = set()
        self.passes = 0

    def start(self, stop: threading.Event) -> None:
        watches: list[tuple[str, _Listed]] = [
            (path(VPA_VERSION, "verticalpodautoscalers"), self.vpas),
            (path("v1", "limitranges"), self.limit_ranges),
            (path(PARAMS_VERSION, PLURAL), self.params),
        ]
        watches += [
            (path(api_version, resource), self.workloads[kind])
            for kind, (api_version, resource, _) in TARGETS.items()
        ]
        loops = [(cache.noun, self._watch(p, cache.noun, cache)) for p, cache in watches]
        self.threads.start([*loops, ("keeper", self._loop)], stop)

    def _watch(self, resource_path: str, noun: str, cache: ObjectCache) -> Any:
        def loop(stop: threading.Event) -> None:
            self.threads.watch(self.api.lister(resource_path), noun, cache, stop)

        return loop

    def join(self, timeout_s: float) -> None:
        self.threads.join(timeout_s, self.dirty)

    def ready(self) -> bool:
        """The VPAs, the LimitRanges and the parameters are known as they are now."""
        return not self._behind()

    def _behind(self) -> dict[str, str]:
        """What is not known as it is now, and why."""
        return {
            c.noun: c.behind_since or "not listed yet"
            for c in (self.vpas, self.limit_ranges, self.params)
            if not c.current
        }

    def healthy(self) -> tuple[bool, str]:
        stopped = sorted(t.name for t in self.threads.threads if not t.is_alive())
        if stopped:
            return False, f"stopped: {', '.join(stopped)}"
        idle = self.clock() - self._turned
        if idle > self.stuck_after_s:
            return False, f"its pass loop has not turned for {idle:.0f} s"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        behind = self._behind()
        if behind:
            return False, "waiting for " + "; ".join(f"{noun}: {why}" for noun, why in behind.items())
        if self.passes == 0:
            return False, "its first pass has not run yet"
        return True, "ok"

    def _loop(self, stop: threading.Event) -> None:
        waiting_said = False
        while not stop.is_set():
            self.dirty.wait(self.resync_s)
            self._turned = self.clock()
            if stop.is_set():
                return
            stop.wait(self.settle_s)  # let a burst of events land in one pass
            self.dirty.clear()
            if not self.ready():
                if not waiting_said:
                    log.info(
                        "keeper.waiting",
                        behind=self._behind(),
                        message="nothing is written until these are known as they are now",
                    )
                    waiting_said = True
                self.dirty.set()
                stop.wait(1.0)
                continue
            waiting_said = False
            if not self.reconcile():
                self.dirty.set()  # a write failed: again after a pause
                stop.wait(min(self.resync_s, 5.0))

    def reconcile(self) -> bool:
        """One pass; False when a write failed."""
        workloads = {kind: c.by_key() for kind, c in self.workloads.items() if c.current}
        want = desired(self.vpas.values(), workloads, self.limit_ranges.values(), self.opts)
        for problem in want.problems:
            if problem not in self._problems:
                self._problems.add(problem)
                log.warning("keeper.unreadable", message=problem)
        have = {
            k: o
            for k, o in self.params.by_key().items()
            if ((o.get("metadata") or {}).get("labels") or {}).get(PARAMS_LABEL) == "true"
        }
        ok = True
        now = self.clock()
        for key, obj in sorted(want.objects.items()):
            if key not in have or differs(have[key], obj):
                if key in have and only_targets_moved(have[key], obj) and (
                        targets_within(have[key], obj, TARGETS_MIN_CHANGE) or now - self._written.get(key, -1e18) < self.targets_every_s):
                    continue  # a new recommendation only: within 10 % not at all, else with the namespace's next write, at the latest in TARGETS_EVERY_S
                if self._apply(key, obj):
                    self._written[key] = now
                else:
                    ok = False
        for key in sorted(k for k in set(have) - set(want.objects) if k[0] not in want.unknown):
            ok = self._delete(key) and ok
        ok = self._label_vpas() and ok
        self.passes += 1
        self._counted(want, ok)
        return ok

    def _label_vpas(self) -> bool:
        """Label the VPAs whose target label is missing or stale (a targetRef changed); at most
        LABELS_PER_PASS, the rest at the next pass (which follows at once). False when a write failed."""
        todo = unlabelled(self.vpas.values())
        ok = True
        for vpa, value in todo[:LABELS_PER_PASS]:
            ok = self._label(vpa, value) and ok
        if len(todo) > LABELS_PER_PASS:
            self.dirty.set()
        return ok

    def _label(self, vpa: Mapping[str, Any], value: str) -> bool:
        meta = vpa.get("metadata") or {}
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        self._turned = self.clock()
        # the UID in the patch is a precondition: a VPA deleted and created again meanwhile is not touched
        body = {"metadata": {"uid": meta.get("uid"), "labels": {TARGET_LABEL: value}}}
        try:
            self.api.patch(path(VPA_VERSION, "verticalpodautoscalers", ns, name), body, MERGE_PATCH, timeout=(10, 30))
        except Exception as err:
            e = err if isinstance(err, APIError) else wrap(f"label VerticalPodAutoscaler {ns}/{name}", err)
            if isinstance(e, APINotFound):
                return True  # gone meanwhile
            self.metrics.errors.labels(type(e).__name__).inc()
            log.warning("keeper.label_failed", namespace=ns, name=name, error=str(e))
            return False
        self.metrics.writes.labels("labelled").inc()
        log.info("keeper.labelled", namespace=ns, name=name, label=f"{TARGET_LABEL}={value}")
        return True

    def _counted(self, want: Desired, ok: bool) -> None:
        m = self.metrics
        m.passes.labels("ok" if ok else "failed").inc()
        specs = [o.get("spec") or {} for o in want.objects.values()]
        m.workloads.set(sum(len(s.get("workloads") or {}) for s in specs))
        m.skipped.set(sum(len(s.get("skipped") or ()) for s in specs))
        m.unreadable.set(len(want.problems))
        m.last_pass.set_to_current_time()

    def _apply(self, key: Key, obj: Mapping[str, Any]) -> bool:
        ns, name = key
        self._turned = self.clock()
        try:
            resp = self.api.request(
                "PATCH",
                path(PARAMS_VERSION, PLURAL, ns, name),
                query={"fieldManager": FIELD_MANAGER, "force": "true"},
                body=json.dumps(obj),
                content_type=APPLY_PATCH,
                timeout=(10, 30),
            )
            try:
                resp.read()  # the whole answer: a connection given back with its body unread desyncs the next request on it
            finally:
                resp.release_conn()
        except Exception as err:  # every transport and API error: logged, tried again
            e = err if isinstance(err, APIError) else wrap(f"apply VPAAdmissionParams {ns}/{name}", err)
            self.metrics.errors.labels(type(e).__name__).inc()
            log.warning("keeper.apply_failed", namespace=ns, name=name, error=str(e))
            return False
        self.metrics.writes.labels("applied").inc()
        spec = obj.get("spec") or {}
        log.info(
            "keeper.applied",
            namespace=ns,
            workloads={k: e["vpa"] for k, e in (spec.get("workloads") or {}).items()},
            skipped={s["vpa"]: s["reason"] for s in spec.get("skipped") or ()},
        )
        return True

    def _delete(self, key: Key) -> bool:
        ns, name = key
        self._turned = self.clock()
        try:
            self.api.delete(path(PARAMS_VERSION, PLURAL, ns, name), timeout=(10, 30))
        except Exception as err:
            e = err if isinstance(err, APIError) else wrap(f"delete VPAAdmissionParams {ns}/{name}", err)
            if isinstance(e, APINotFound):
                return True
            self.metrics.errors.labels(type(e).__name__).inc()
            log.warning("keeper.delete_failed", namespace=ns, name=name, error=str(e))
            return False
        self.metrics.writes.labels("deleted").inc()
        log.info("keeper.deleted", namespace=ns, name=name)
        return True


def unlabelled(vpas: list[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], str]]:
    """The VPAs whose target label is not what their targetRef says, with the value it should be (pure)."""
    out = []
    for vpa in vpas:
        value = wanted_value(vpa)
        if value is not None and label_of(vpa) != value:
            out.append((vpa, value))
    return sorted(out, key=lambda t: (str((t[0].get("metadata") or {}).get("namespace")), str((t[0].get("metadata") or {}).get("name"))))
