"""A VPA recommendation as one more source of desired state (precedence 50: above the spec, below the
resize annotation), so that VPA in place is not a path of its own: the reconciler resizes the pod as it
resizes any other.

What became of it: a resize the node refuses (Infeasible) or puts off (Deferred) — the kubelet's
`PodResizePending` condition where the kubelet resizes, the engine's resize state elsewhere — is kept as
`Blocked` and reported once (`on_blocked`); the next decision is sent only when the recommendation lowers
(Infeasible) or changes (Deferred), never the same again.

An OOM kill the node saw (`oom_seen`, from the node's recommender) is a quick OOM at once, without waiting
for the pod status; a VPA that names the node's recommender gets that recommender's raised memory target
at once too.

Which VPA: the one whose `spec.targetRef` is on the pod's owner chain (Pod → ReplicaSet → Deployment,
or a StatefulSet, DaemonSet, Job, or any other controller), resolved from an owner map the watch keeps;
two VPAs on one chain → the pod is left alone and reported, never guessed.

What it proposes: `agent.vpa.policy.decide` says whether VPA's updater would act now and to what, or, for a
pod that sets pod-level resources, `agent.vpa.podlevel_decide` (the pod level as one more target, named
POD: agent.vpa.podlevel_source), under the same gates. Once a
target is applied it is kept (proposed again) until a later decision replaces it, so that the pod is
not resized back when the updater's condition stops holding (a pod inside its bounds again, say), and a
disabled VPA (panic button) touches nothing already applied. Pure: the watch replaces the snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from agent.core.model import PodView
from agent.pods.parse import controller_owner, parse_pod, pod_key
from agent.pods.sources.base import ContainerResources, Proposal
from agent.vpa.applied import ActuatorState
from agent.vpa.floors import Floor
from agent.vpa.model import VPA
from agent.vpa.podlevel import PodBounds
from agent.vpa.podlevel_decide import managed_targets
from agent.vpa.podlevel_source import PodLevelRecord, decide_pod, pod_values, sets_pod_level, split
from agent.vpa.podstatus import QUICK_OOM_S, age_s, quick_oom, resize_pending
from agent.vpa.policy import (
    SAME,
    Blocked,
    ContainerTarget,
    Options,
    ResizeBlock,
    Verdict,
    api_resources,
    clamped_targets,
    decide,
    not_actuated_because,
    retry_allowed,
    target_values,
    with_local_memory,
)
from agent.vpa.react import Reaction
from agent.vpa.reacting import Reactor, running_memory

NAME: Final = "vpa"
PRECEDENCE: Final = 50
MAX_CHAIN: Final = 8
LOCAL_RECOMMENDER: Final = "kube-cgroup-agent"  # the node recommender's name in a VPA's spec.recommenders

Kept = tuple[str, tuple[ContainerTarget, ...]]  # (VPA key, the targets applied)
OwnerKey = tuple[str, str, str]  # (namespace, kind, name)
Owners = Mapping[OwnerKey, tuple[str, str]]  # an object -> its controller (kind, name)


def owner_chain(namespace: str, first: tuple[str, str] | None, owners: Owners) -> tuple[tuple[str, str], ...]:
    """The pod's controller, its controller's controller, ... (cycle-safe, at most MAX_CHAIN deep)."""
    out: list[tuple[str, str]] = []
    cur = first
    while cur is not None and cur not in out and len(out) < MAX_CHAIN:
        out.append(cur)
        cur = owners.get((namespace, *cur))
    return tuple(out)


def owners_from(objects: Iterable[Mapping[str, Any]]) -> dict[OwnerKey, tuple[str, str]]:
    """The owner map from objects that have a controller (ReplicaSets: the link from a pod's ReplicaSet
    to its Deployment)."""
    owners: dict[OwnerKey, tuple[str, str]] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        kind = str(obj.get("kind") or "ReplicaSet")
        for ref in meta.get("ownerReferences") or ():
            if isinstance(ref, Mapping) and ref.get("controller") is True:
                owners[(str(meta.get("namespace") or ""), kind, str(meta.get("name")))] = (
                    str(ref.get("kind")),
                    str(ref.get("name")),
                )
    return owners


@dataclass(frozen=True, slots=True)
class Resolution:
    vpa: VPA | None
    conflict: tuple[str, ...] = ()  # the VPAs (keys) that all claim the pod, when more than one


def resolve(namespace: str, chain: Sequence[tuple[str, str]], vpas: Sequence[VPA]) -> Resolution:
    on_chain = set(chain)
    found = [v for v in vpas if v.namespace == namespace and (v.target_kind, v.target_name) in on_chain]
    if len(found) > 1:
        return Resolution(None, tuple(sorted(v.key for v in found)))
    return Resolution(found[0] if found else None)


@dataclass
class VPASource:
    """The VPA source; `vpas`, `owners` and `enabled` are replaced by the component that watches them."""

    vpas: tuple[VPA, ...] = ()
    owners: Owners = field(default_factory=dict)
    opts: Options = field(default_factory=Options)
    enabled: bool = True  # the panic button: False stops every new VPA-driven change
    now: Callable[[], float] = lambda: datetime.now().timestamp()
    propose_changes: bool = True  # False where the kubelet resizes: decisions go to `pending` for the API
    name: str = NAME
    precedence: int = PRECEDENCE
    pending: dict[str, tuple[str, str, str, tuple[ContainerTarget, ...]]] = field(
        default_factory=dict
    )  # uid -> (ns, pod, vpa, targets)
    wake: threading.Event = field(default_factory=threading.Event)  # set when `pending` gained a decision
    on_verdict: Callable[[str, str, Verdict], None] | None = None  # (pod, vpa, verdict) when it changed
    # pod key -> container -> working set (the pod cgroup's under POD), kept by the component that reads
    # the kernel; None: not read on this node (no cap, as VPA itself)
    usage: dict[str, dict[str, int]] | None = None
    applied: dict[str, tuple[str, tuple[ContainerTarget, ...]]] = field(
        default_factory=dict
    )  # uid -> (vpa, targets)
    verdicts: dict[str, tuple[str, Verdict]] = field(default_factory=dict)  # pod key -> (vpa, last verdict)
    conflicts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pod key -> the VPAs claiming it
    blocked: dict[str, Blocked] = field(default_factory=dict)  # uid -> the resize refused or put off
    sent: dict[str, tuple[str, tuple[ContainerTarget, ...]]] = field(
        default_factory=dict
    )  # uid -> (vpa, targets) sent through pods/resize
    on_blocked: Callable[[str, str, Blocked], None] | None = (
        None  # (pod key, uid, what) when a resize became blocked
    )
    on_conflict: Callable[[str, str, tuple[str, ...]], None] | None = (
        None  # (pod key, uid, VPAs) when it starts
    )
    on_state: Callable[[ActuatorState], None] | None = (
        None  # persist `applied` and `blocked` when they change
    )
    ooms: dict[str, dict[str, tuple[float, int | None]]] = field(
        default_factory=dict
    )  # pod key -> container -> (when, local memory target)
    reactor: Reactor = field(default_factory=Reactor)  # the floors of the reactions (agent.vpa.react)
    # the namespace's LimitRange type Pod (agent.vpa.podlevel.pod_bounds), where the node reads it
    pod_bounds: Callable[[str], PodBounds | None] = lambda namespace: None
    record: bool = False  # keep, per pod, the VPA and every container's clamped target (for `explain`)
    records: dict[str, tuple[VPA, tuple[ContainerTarget, ...], PodLevelRecord | None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.reactor.on_floors = self._persist

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        meta = raw.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, key = meta.get("namespace") or "default", pod_key(raw)
        res = resolve(namespace, owner_chain(namespace, controller_owner(meta), self.owners), self.vpas)
        with self._lock:
            if res.conflict:
                if self.conflicts.get(key) != res.conflict and self.on_conflict is not None:
                    self.on_conflict(key, str(meta.get("uid") or ""), res.conflict)
                self.conflicts[key] = res.conflict
            else:
                self.conflicts.pop(key, None)
            kept = self.applied.get(str(meta.get("uid")))
            if res.vpa is None:  # most pods: decided from the metadata alone, the pod is not parsed again
                return self._proposal(kept, "") if kept else None
            pod = parse_pod(raw, sources=())  # the spec alone: what the pod has now
            if not self.propose_changes:
                self._kubelet_outcome(pod, raw, res.vpa.key)
            if not self.enabled:
                self._verdict(
                    pod.key, res.vpa.key, Verdict(False, "VPA changes are off on this node (panic button)")
                )
                return self._proposal(kept, "kept from before the panic button") if kept else None
            usage = self.usage.get(pod.key, {}) if self.usage is not None else None
            vpa, oomed = self._after_local_oom(res.vpa, pod.key)
            reaction = None
            if not_actuated_because(vpa, self.opts) is None:
                vpa, reaction = self._reactions(pod, raw, vpa, self.applied.get(pod.uid))
            age, oom, pod_record = age_s(raw, self.now()), oomed or quick_oom(raw), None
            if sets_pod_level(pod):
                bounds = self.pod_bounds(pod.namespace)
                verdict, pod_record = decide_pod(pod, vpa, age, oom, self.opts, usage, bounds, reaction)
            else:
                verdict = decide(pod, vpa, age, oom, self.opts, usage, reaction)
            if self.record:
                shown = managed_targets(pod, vpa) if pod_record is not None else clamped_targets(pod, vpa)
                self.records[pod.key] = (vpa, shown, pod_record)
            verdict = self._unless_blocked(pod.uid, verdict)
            self._verdict(pod.key, res.vpa.key, verdict)
            if not self.propose_changes:  # the spec itself will change (pods/resize): nothing to keep
                if verdict.apply:
                    self.pending[pod.uid] = (pod.namespace, pod.name, res.vpa.key, verdict.targets)
                    self.wake.set()
                return None
            if verdict.apply:
                kept = (res.vpa.key, verdict.targets)
                if self.applied.get(pod.uid) != kept:
                    self.applied[pod.uid] = kept
                    self._persist()
            elif reaction is not None and verdict.reason == SAME and kept:  # a decay back to the spec itself
                kept = None
                del self.applied[pod.uid]
                self._persist()
            return self._proposal(kept, verdict.reason) if kept else None

    def _after_local_oom(self, vpa: VPA, key: str) -> tuple[VPA, bool]:
        """(the VPA with the node recommender's memory targets after a recent OOM, whether one happened)."""
        recent = {c: m for c, (at, m) in self.ooms.get(key, {}).items() if self.now() - at < QUICK_OOM_S}
        if recent and LOCAL_RECOMMENDER in vpa.recommenders:
            for container, memory in recent.items():
                if memory:
                    vpa = with_local_memory(vpa, container, memory)
        return vpa, bool(recent)

    def _reactions(self, pod: PodView, raw: Mapping[str, Any], vpa: VPA, kept: Kept | None) -> tuple[VPA, str | None]:
        """The pod's reaction floors under the VPA (an OOM the node's recommender saw counted first)."""
        running = running_memory(pod, kept[1] if kept else ())
        if self.reactor.oom:
            for container, (at, _) in self.ooms.get(pod.key, {}).items():
                self.reactor.oom_seen(pod, vpa, container, at, None, running.get(container))
        peaks = self.usage.get(pod.key) if self.usage is not None else None
        return self.reactor.overlay(pod, raw, vpa, self.now(), peaks, running)

    def react_cpu(self, pod: PodView, reaction: Reaction) -> None:
        """A CPU reaction of the loop that reads the CFS counters (agent.daemon.vpa_react)."""
        with self._lock:
            self.reactor.set_cpu(pod, reaction, self.now())

    def floors_of(self, uid: str) -> dict[str, Floor]:
        with self._lock:
            return dict(self.reactor.floors.get(uid, {}))

    def _unless_blocked(self, uid: str, verdict: Verdict) -> Verdict:
        """The retry rule after a refused or put-off resize (agent.vpa.policy.retry_allowed)."""
        blocked = self.blocked.get(uid)
        if blocked is None:
            return verdict
        if verdict.apply:
            if retry_allowed(blocked, verdict.targets):
                del self.blocked[uid]
                self._persist()
                return verdict
            return Verdict(False, blocked.why(), held=verdict.held)
        if verdict.reason == SAME:  # the spec is already at the refused values (pods/resize)
            return Verdict(False, blocked.why(), held=verdict.held)
        return verdict

    def _kubelet_outcome(self, pod: PodView, raw: Mapping[str, Any], vpa: str) -> None:
        """Where the kubelet resizes: what its PodResizePending condition says of what was sent (for
        `explain`, which sent nothing itself: of what the spec asks for now)."""
        blocked = self.blocked.get(pod.uid)
        sent = self.sent.get(pod.uid) or ((blocked.vpa, blocked.targets) if blocked else None)
        if sent is None and not self.record:
            return  # most pods: nothing sent, nothing to follow
        asked = tuple(ContainerTarget(c.name, c.requests, c.limits) for c in pod.containers)
        asked += (pod_values(pod),) if sets_pod_level(pod) else ()
        sent = sent or (vpa, asked)
        pending = resize_pending(raw)
        if pending is None:
            # no condition: accepted if the spec holds what was sent; a resize the API server refused
            # never reached the spec and stays blocked
            spec = {t.container: target_values(t) for t in asked}
            if (
                all(spec.get(t.container) == target_values(t) for t in sent[1])
                and self.blocked.pop(pod.uid, None) is not None
            ):
                self._persist()
            return
        self._block(pod.key, pod.uid, Blocked(sent[0], sent[1], *pending))

    def observe_status(self, uid: str, key: str, state: str, message: str) -> None:
        """Where the agent resizes: the engine's resize state of a pod whose VPA target is applied."""
        with self._lock:
            kept = self.applied.get(uid)
            if kept is None:
                return
            if state in (ResizeBlock.INFEASIBLE.value, ResizeBlock.DEFERRED.value):
                self._block(key, uid, Blocked(kept[0], kept[1], ResizeBlock(state), message))
            elif state in ("Done", "InProgress") and self.blocked.pop(uid, None) is not None:
                self._persist()

    def _block(self, key: str, uid: str, blocked: Blocked) -> None:
        if self.blocked.get(uid) == blocked:
            return
        self.blocked[uid] = blocked
        self._persist()
        if self.on_blocked is not None:
            self.on_blocked(key, uid, blocked)

    def oom_seen(self, key: str, container: str, memory: int | None) -> None:
        """The node saw `container` of pod `key` OOM-killed (`memory`: the node recommender's new target)."""
        with self._lock:
            self.ooms.setdefault(key, {})[container] = (self.now(), memory)

    def refused(
        self, uid: str, key: str, vpa: str, targets: tuple[ContainerTarget, ...], message: str
    ) -> None:
        """The API server refused the pods/resize itself (not enough allocatable on the node, invalid):
        Infeasible, as when the kubelet says so."""
        with self._lock:
            self.sent[uid] = (vpa, targets)
            self._block(key, uid, Blocked(vpa, targets, ResizeBlock.INFEASIBLE, message))

    def sent_through_api(self, uid: str, vpa: str, targets: tuple[ContainerTarget, ...]) -> None:
        with self._lock:
            self.sent[uid] = (vpa, targets)

    def _persist(self) -> None:
        if self.on_state is not None:
            floors = {u: dict(f) for u, f in self.reactor.floors.items() if f}
            self.on_state(ActuatorState(dict(self.applied), dict(self.blocked), floors))

    def restore(self, state: ActuatorState) -> None:
        """What was kept before a restart (agent.vpa.applied)."""
        with self._lock:
            self.applied = dict(state.applied)
            self.blocked = dict(state.blocked)
            self.reactor.floors = {u: dict(f) for u, f in state.floors.items()}

    def _verdict(self, pod: str, vpa: str, verdict: Verdict) -> None:
        if self.verdicts.get(pod) != (vpa, verdict) and self.on_verdict is not None:
            self.on_verdict(pod, vpa, verdict)
        self.verdicts[pod] = (vpa, verdict)

    def acting_vpa(self, pod: PodView) -> VPA | None:
        """The one VPA acted on for this pod now (opted in, a mode acted on, the panic button off), or None."""
        vpa = resolve(pod.namespace, owner_chain(pod.namespace, pod.owner, self.owners), self.vpas).vpa
        return vpa if vpa is not None and self.enabled and not_actuated_because(vpa, self.opts) is None else None

    def controlled(self, namespace: str, owner: tuple[str, str] | None) -> bool:
        """Whether exactly one VPA controls a pod with this controller (for the usage reader)."""
        return resolve(namespace, owner_chain(namespace, owner, self.owners), self.vpas).vpa is not None

    def held_pods(self) -> list[str]:
        """Pods (keys) whose last decision holds a memory limit above the recommendation."""
        with self._lock:
            return [k for k, (_, v) in self.verdicts.items() if v.held]

    def take_pending(self) -> dict[str, tuple[str, str, str, tuple[ContainerTarget, ...]]]:
        with self._lock:
            out, self.pending = self.pending, {}
        return out

    def prune(self, uids: AbstractSet[str], keys: AbstractSet[str]) -> None:
        """Drop what is kept about pods no longer on the node (`uids`, `keys`: those still here)."""
        with self._lock:
            gone = [u for u in (*self.applied, *self.pending, *self.blocked, *self.sent) if u not in uids]
            had = len(self.applied) + len(self.blocked)
            for uid in gone:
                for kept in (self.applied, self.pending, self.blocked, self.sent):
                    kept.pop(uid, None)
            for key in [k for k in (*self.verdicts, *self.conflicts, *self.ooms) if k not in keys]:
                self.verdicts.pop(key, None)
                self.conflicts.pop(key, None)
                self.ooms.pop(key, None)
            if self.reactor.prune(set(uids)) or len(self.applied) + len(self.blocked) != had:
                self._persist()
            if self.usage is not None:
                self.usage = {k: v for k, v in self.usage.items() if k in keys}

    def _proposal(self, kept: tuple[str, tuple[ContainerTarget, ...]], why: str) -> Proposal:
        vpa, targets = kept
        pod, moved = split(targets)  # the pod level, when it moves, goes to `spec.resources`
        containers: dict[tuple[Any, str], ContainerResources] = {}
        for t in moved:
            containers[("containers", t.container)] = api_resources(t)  # type: ignore[assignment]
        resources: ContainerResources | None = api_resources(pod) if pod is not None else None  # type: ignore[assignment]
        return Proposal(self.name, containers, resources, note=f"VPA {vpa}" + (f": {why}" if why else ""))

