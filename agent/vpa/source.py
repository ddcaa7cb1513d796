"""A VPA recommendation as one more source of desired state (precedence 50: above the spec, below the
resize annotation), so that VPA in place is not a path of its own: the reconciler resizes the pod as it
resizes any other.

Which VPA: the one whose `spec.targetRef` is on the pod's owner chain (Pod → ReplicaSet → Deployment,
or a StatefulSet, DaemonSet, Job, or any other controller), resolved from an owner map the watch keeps;
two VPAs on one chain → the pod is left alone and reported, never guessed.

What it proposes: `agent.vpa.policy.decide` says whether VPA's updater would act now and to what. Once a
target is applied it is kept (proposed again) until a later decision replaces it, so that the pod is
not resized back when the updater's condition stops holding (a pod inside its bounds again, say), and a
disabled VPA (panic button) touches nothing already applied. Pure: the watch replaces the snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from agent.pods.parse import controller_owner, parse_pod, pod_key
from agent.sources.base import ContainerResources, Proposal
from agent.vpa.model import VPA
from agent.vpa.policy import ContainerTarget, Options, Verdict, api_resources, decide

NAME: Final = "vpa"
PRECEDENCE: Final = 50
QUICK_OOM_S: Final = 600.0  # EvictAfterOOMThreshold, updater config.go
MAX_CHAIN: Final = 8

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
    pending: dict[str, tuple[str, str, str, tuple[ContainerTarget, ...]]] = field(default_factory=dict)  # uid -> (ns, pod, vpa, targets)
    wake: threading.Event = field(default_factory=threading.Event)  # set when `pending` gained a decision
    on_verdict: Callable[[str, str, Verdict], None] | None = None  # (pod, vpa, verdict) when it changed
    # pod key -> container -> working set, kept by the component that reads the kernel; None: not read
    # on this node (no cap, as VPA itself)
    usage: dict[str, dict[str, int]] | None = None
    applied: dict[str, tuple[str, tuple[ContainerTarget, ...]]] = field(default_factory=dict)  # uid -> (vpa, targets)
    verdicts: dict[str, tuple[str, Verdict]] = field(default_factory=dict)  # pod key -> (vpa, last verdict)
    conflicts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pod key -> the VPAs claiming it
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        meta = raw.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, key = meta.get("namespace") or "default", pod_key(raw)
        res = resolve(namespace, owner_chain(namespace, controller_owner(meta), self.owners), self.vpas)
        with self._lock:
            if res.conflict:
                self.conflicts[key] = res.conflict
            else:
                self.conflicts.pop(key, None)
            kept = self.applied.get(str(meta.get("uid")))
            if res.vpa is None:  # most pods: decided from the metadata alone, the pod is not parsed again
                return self._proposal(kept, "") if kept else None
            pod = parse_pod(raw, sources=())  # the spec alone: what the pod has now
            if not self.enabled:
                self._verdict(pod.key, res.vpa.key, Verdict(False, "VPA changes are off on this node (panic button)"))
                return self._proposal(kept, "kept from before the panic button") if kept else None
            usage = self.usage.get(pod.key, {}) if self.usage is not None else None
            verdict = decide(pod, res.vpa, _age_s(raw, self.now()), _quick_oom(raw), self.opts, usage)
            self._verdict(pod.key, res.vpa.key, verdict)
            if not self.propose_changes:  # the spec itself will change (pods/resize): nothing to keep
                if verdict.apply:
                    self.pending[pod.uid] = (pod.namespace, pod.name, res.vpa.key, verdict.targets)
                    self.wake.set()
                return None
            if verdict.apply:
                kept = (res.vpa.key, verdict.targets)
                self.applied[pod.uid] = kept
            return self._proposal(kept, verdict.reason) if kept else None

    def _verdict(self, pod: str, vpa: str, verdict: Verdict) -> None:
        if self.verdicts.get(pod) != (vpa, verdict) and self.on_verdict is not None:
            self.on_verdict(pod, vpa, verdict)
        self.verdicts[pod] = (vpa, verdict)

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
            for uid in [u for u in (*self.applied, *self.pending) if u not in uids]:
                self.applied.pop(uid, None)
                self.pending.pop(uid, None)
            for key in [k for k in (*self.verdicts, *self.conflicts) if k not in keys]:
                self.verdicts.pop(key, None)
                self.conflicts.pop(key, None)
            if self.usage is not None:
                self.usage = {k: v for k, v in self.usage.items() if k in keys}

    def _proposal(self, kept: tuple[str, tuple[ContainerTarget, ...]], why: str) -> Proposal:
        vpa, targets = kept
        containers: dict[tuple[Any, str], ContainerResources] = {}
        for t in targets:
            containers[("containers", t.container)] = api_resources(t)  # type: ignore[assignment]
        return Proposal(self.name, containers, note=f"VPA {vpa}" + (f": {why}" if why else ""))


def _stamp(v: object) -> float | None:
    if not isinstance(v, str):
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _age_s(raw: Mapping[str, Any], now: float) -> float | None:
    status = raw.get("status")
    start = _stamp(status.get("startTime")) if isinstance(status, Mapping) else None
    return None if start is None else now - start


def _quick_oom(raw: Mapping[str, Any]) -> bool:
    """A container OOM-killed within QUICK_OOM_S of its start (the updater's quick OOM)."""
    status = raw.get("status")
    for cs in (status.get("containerStatuses") or []) if isinstance(status, Mapping) else []:
        last = cs.get("lastState") if isinstance(cs, Mapping) else None
        term = last.get("terminated") if isinstance(last, Mapping) else None
        if isinstance(term, Mapping) and term.get("reason") == "OOMKilled":
            started, finished = _stamp(term.get("startedAt")), _stamp(term.get("finishedAt"))
            if started is not None and finished is not None and finished - started < QUICK_OOM_S:
                return True
    return False
