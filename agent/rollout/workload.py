"""A StatefulSet or DaemonSet the agents roll out, and its pods, as the rollout needs them (pure).

Opt-in: `spec.updateStrategy.type: OnDelete` (the stock controller then never deletes a pod itself and
recreates a deleted one at the update revision) and the annotation `kube-cgroup-agent.io/pod-update-policy`
(`InPlaceIfPossible` or `Recreate`). The rollout's knobs are annotations named after the fields they
stand for; a bad value is one `RolloutConfigError` naming the workload and the annotation.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent.infra.errors import PermanentError
from agent.rollout.order import PodState, Rollout, WorkloadKind, max_unavailable, ordinal

PREFIX: Final = "kube-cgroup-agent.io/"
POLICY: Final = PREFIX + "pod-update-policy"
MAX_UNAVAILABLE: Final = PREFIX + "max-unavailable"
PARTITION: Final = PREFIX + "partition"
GRACE: Final = PREFIX + "grace-period-seconds"
STATUS: Final = PREFIX + "rollout-status"  # on a StatefulSet (one key a node), on a DaemonSet's pods
STATE: Final = PREFIX + "in-place-update-state"  # on a pod updated in place: revision, images, when
READY_GATE: Final = PREFIX + "InPlaceUpdateReady"  # the readiness gate / condition type
REVISION_LABEL: Final = "controller-revision-hash"
GENERATION_LABEL: Final = "pod-template-generation"  # DaemonSet pods


class Policy(enum.StrEnum):
    IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"
    RECREATE = "Recreate"


class RolloutConfigError(PermanentError, ValueError):
    def __init__(self, workload: str, message: str) -> None:
        super().__init__(f"{workload}: {message}", workload=workload)


@dataclass(frozen=True, slots=True)
class Workload:
    kind: WorkloadKind
    namespace: str
    name: str
    uid: str
    policy: Policy
    selector: Mapping[str, str]  # spec.selector.matchLabels
    replicas: int
    generation: int  # the DaemonSet's metadata.generation: its pods' pod-template-generation
    update_revision: str | None  # StatefulSet status.updateRevision (DaemonSets: from their revisions)
    max_unavailable_raw: object = 1
    partition: int = 0
    grace_s: int = 0
    readiness_gate: bool = False  # the template lists the InPlaceUpdateReady readiness gate
    observed_generation: int = 0  # status.observedGeneration: the controller has seen `generation` when equal

    @property
    def key(self) -> str:
        return f"{self.kind.value}/{self.namespace}/{self.name}"

    @property
    def label_selector(self) -> str:
        """spec.selector.matchLabels as a list call's labelSelector."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))

    def rollout(self, update_revision: str, total: int) -> Rollout:
        return Rollout(self.kind, update_revision, total, max_unavailable(self.max_unavailable_raw, total), self.partition)


def _int_annotation(key: str, annotations: Mapping[str, Any], name: str, default: int) -> int:
    raw = annotations.get(name)
    if raw is None:
        return default
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()):
        raise RolloutConfigError(key, f"annotation {name}: {raw!r} is not a non-negative integer")
    return int(text)


def parse_workload(kind: str, raw: Mapping[str, Any]) -> Workload | None:
    """The workload when it opts in (None when it does not); RolloutConfigError for a bad opt-in."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    policy_raw = annotations.get(POLICY)
    if policy_raw is None:
        return None
    key = f"{kind}/{meta.get('namespace') or 'default'}/{meta.get('name')}"
    try:
        policy = Policy(str(policy_raw))
    except ValueError:
        raise RolloutConfigError(key, f"annotation {POLICY}: {policy_raw!r} is not InPlaceIfPossible or Recreate") from None
    spec = raw.get("spec") or {}
    strategy = ((spec.get("updateStrategy") or {}).get("type")) or "RollingUpdate"
    if strategy != "OnDelete":
        raise RolloutConfigError(key, f"updateStrategy {strategy}: the agents roll out only OnDelete workloads (the controller would roll it out too)")
    mu = annotations.get(MAX_UNAVAILABLE, 1)
    try:
        max_unavailable(mu, 100)
    except ValueError as err:
        raise RolloutConfigError(key, f"annotation {MAX_UNAVAILABLE}: {err}") from None
    template = spec.get("template") or {}
    gates = (template.get("spec") or {}).get("readinessGates") or []
    status = raw.get("status") or {}
    wkind = WorkloadKind(kind)
    replicas = spec.get("replicas", 1) if wkind is WorkloadKind.STATEFUL_SET else status.get("desiredNumberScheduled", 0)
    return Workload(
        wkind,
        str(meta.get("namespace") or "default"),
        str(meta.get("name")),
        str(meta.get("uid") or ""),
        policy,
        dict((spec.get("selector") or {}).get("matchLabels") or {}),
        int(replicas or 0),
        int(meta.get("generation") or 0),
        status.get("updateRevision") if wkind is WorkloadKind.STATEFUL_SET else None,
        mu,
        _int_annotation(key, annotations, PARTITION, 0),
        _int_annotation(key, annotations, GRACE, 0),
        any(isinstance(g, Mapping) and g.get("conditionType") == READY_GATE for g in gates),
        int(status.get("observedGeneration") or 0),
    )


def owned_by(raw: Mapping[str, Any], uid: str) -> bool:
    refs = (raw.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("uid") == uid and r.get("controller") for r in refs)


def daemonset_update_revision(revisions: Sequence[Mapping[str, Any]], uid: str) -> Mapping[str, Any] | None:
    """The DaemonSet's update revision: its ControllerRevision with the highest `.revision`."""
    own = [r for r in revisions if owned_by(r, uid)]
    return max(own, key=lambda r: int(r.get("revision") or 0), default=None)


def revision_hash(revision: Mapping[str, Any]) -> str:
    """What a pod's controller-revision-hash label says for this revision (StatefulSet: the revision's
    name; DaemonSet: its hash label)."""
    meta = revision.get("metadata") or {}
    labels = meta.get("labels") or {}
    return str(labels.get(REVISION_LABEL) or meta.get("name") or "")


def condition(raw: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """The pod's condition of this type, if it has one."""
    for c in ((raw.get("status") or {}).get("conditions") or []):
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return None


def in_place_revision(raw: Mapping[str, Any]) -> str | None:
    """The revision the agent's in-place patch moved the pod to (its state annotation), if any."""
    text = ((raw.get("metadata") or {}).get("annotations") or {}).get(STATE)
    try:
        state = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return str(state.get("revision")) if isinstance(state, Mapping) else None


def pod_state(raw: Mapping[str, Any], node_of: str, failed: bool) -> PodState:
    meta = raw.get("metadata") or {}
    name = str(meta.get("name"))
    ready = condition(raw, "Ready")
    gate = condition(raw, READY_GATE)
    return PodState(
        name,
        node_of,
        str((meta.get("labels") or {}).get(REVISION_LABEL) or ""),
        ready is not None and ready.get("status") == "True",
        ordinal(name),
        updating=gate is not None and gate.get("status") == "False",
        failed=failed,
        terminating=meta.get("deletionTimestamp") is not None,
    )
