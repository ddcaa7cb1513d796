"""The API bodies and checks of one pod's in-place update (pure): the readiness condition, the image
patch, whether the changed containers run the new image, whether anything restarted that should not,
and whether an updated pod failed (which halts the rollout)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.infra.durations import parse_timestamp
from agent.rollout.eligibility import Change
from agent.rollout.order import WorkloadKind
from agent.rollout.workload import (
    GENERATION_LABEL,
    READY_GATE,
    REVISION_LABEL,
    STATE,
    Workload,
    condition,
    in_place_revision,
)


@dataclass(frozen=True, slots=True)
class ContainerRun:
    container_id: str
    restarts: int
    image_id: str
    ready: bool


def runs(raw: Mapping[str, Any]) -> dict[str, ContainerRun]:
    """Each regular container's current run, from the pod status."""
    out = {}
    for cs in ((raw.get("status") or {}).get("containerStatuses") or []):
        if isinstance(cs, Mapping) and cs.get("name"):
            out[str(cs["name"])] = ContainerRun(
                str(cs.get("containerID") or ""), int(cs.get("restartCount") or 0), str(cs.get("imageID") or ""), cs.get("ready") is True
            )
    return out


def progress(before: Mapping[str, ContainerRun], now: Mapping[str, ContainerRun], changed: frozenset[str]) -> tuple[bool, list[str]]:
    """(every changed container runs a new container and is ready, the unchanged ones that restarted)."""
    done = all(
        c in now and now[c].ready and now[c].container_id != before.get(c, ContainerRun("", 0, "", False)).container_id
        for c in changed
    )
    restarted = sorted(
        c for c, run in before.items()
        if c not in changed and c in now and (now[c].container_id != run.container_id or now[c].restarts != run.restarts)
    )
    return done, restarted


def condition_body(uid: str, ready: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    """The strategic-merge patch of pods/status setting the InPlaceUpdateReady condition (UID guarded)."""
    return {
        "metadata": {"uid": uid},
        "status": {"conditions": [{
            "type": READY_GATE, "status": "True" if ready else "False", "reason": reason, "message": message,
            "lastTransitionTime": now,
        }]},
    }


def in_place_body(raw: Mapping[str, Any], workload: Workload, update_hash: str, change: Change, now: str) -> dict[str, Any]:
    """One strategic-merge patch: the changed images, the revision labels, the template's label and
    annotation changes (when on), the state annotation — with the pod's resourceVersion as precondition."""
    meta = raw.get("metadata") or {}
    labels: dict[str, str | None] = {**change.labels, REVISION_LABEL: update_hash}
    if workload.kind is WorkloadKind.DAEMON_SET:
        labels[GENERATION_LABEL] = str(workload.generation)
    state = {"revision": update_hash, "images": dict(change.images), "updatedAt": now}
    body: dict[str, Any] = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": labels,
            "annotations": {**change.annotations, STATE: json.dumps(state, sort_keys=True)},
        },
    }
    if change.images:
        body["spec"] = {"containers": [{"name": n, "image": i} for n, i in sorted(change.images.items())]}
    return body


def is_failed(raw: Mapping[str, Any], update_hash: str, now: float, timeout_s: float) -> bool:
    """At the update revision and not Ready `timeout_s` after it got there: updated in place (the
    InPlaceUpdateReady condition False since then) or recreated (created then)."""
    meta = raw.get("metadata") or {}
    if (meta.get("labels") or {}).get(REVISION_LABEL) != update_hash or meta.get("deletionTimestamp"):
        return False
    gate = condition(raw, READY_GATE)
    if gate is not None:
        since = parse_timestamp(gate.get("lastTransitionTime"))
        return gate.get("status") == "False" and since is not None and now - since > timeout_s
    ready = condition(raw, "Ready")
    created = parse_timestamp(meta.get("creationTimestamp"))
    return (ready is None or ready.get("status") != "True") and created is not None and now - created > timeout_s


def gate_of(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's InPlaceUpdateReady condition, if it has one."""
    return condition(raw, READY_GATE)


def has_gate(raw: Mapping[str, Any]) -> bool:
    gates = (raw.get("spec") or {}).get("readinessGates") or []
    return any(isinstance(g, Mapping) and g.get("conditionType") == READY_GATE for g in gates)


def patched_and_running(raw: Mapping[str, Any]) -> bool:
    """The agent's in-place patch landed (its state annotation names the revision the pod's label now
    carries) and every container runs ready: what is left of an update interrupted after its patch."""
    label = ((raw.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)
    done = label is not None and in_place_revision(raw) == label
    statuses = (raw.get("status") or {}).get("containerStatuses") or []
    return done and bool(statuses) and all(isinstance(c, Mapping) and c.get("ready") is True for c in statuses)
