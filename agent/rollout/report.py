"""What `kube-cgroup-agent rollout status` shows (pure): each pod of a workload, where it stands in the
rollout and why — updated in place, recreated, updating, waiting (and for what), halted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.rollout.handout import turn_of
from agent.rollout.order import WorkloadKind, turns
from agent.rollout.steps import gate_of, is_failed
from agent.rollout.workload import Workload, in_place_revision, pod_state


@dataclass(frozen=True, slots=True)
class PodRow:
    pod: str
    node: str
    revision: str
    ready: bool
    state: str  # updated in place | updated | updating | waiting | halted | failed
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Status:
    workload: str
    update_revision: str
    rows: tuple[PodRow, ...]

    @property
    def updated(self) -> int:
        return sum(1 for r in self.rows if r.state in ("updated in place", "updated"))

    @property
    def complete(self) -> bool:
        return bool(self.rows) and all(r.state in ("updated in place", "updated") and r.ready for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "updateRevision": self.update_revision,
            "updated": self.updated,
            "pods": len(self.rows),
            "complete": self.complete,
            "rows": [{"pod": r.pod, "node": r.node, "revision": r.revision, "ready": r.ready, "state": r.state, "reason": r.reason} for r in self.rows],
        }


def status(w: Workload, pods: Sequence[Mapping[str, Any]], update_hash: str, now: float, timeout_s: float) -> Status:
    states = [pod_state(p, str((p.get("spec") or {}).get("nodeName") or ""), is_failed(p, update_hash, now, timeout_s)) for p in pods]
    if w.kind is WorkloadKind.DAEMON_SET:  # a turn the keeper gave holds a place in the budget
        states = [replace(s, updating=True) if turn_of(p) == update_hash and s.revision != update_hash else s
                  for p, s in zip(pods, states, strict=True)]
    rollout = w.rollout(update_hash, max(w.replicas, len(states)))
    why = {t.pod: t for t in turns(rollout, states, None)}  # the budget is the workload's, across its nodes
    rows = []
    for raw, s in sorted(zip(pods, states, strict=True), key=lambda x: x[1].name):
        if s.failed:
            row = PodRow(s.name, s.node, s.revision, s.ready, "failed", "not Ready at the update revision within the timeout: the rollout is halted")
        elif s.revision == update_hash:
            gate = gate_of(raw)
            if gate is not None and gate.get("status") == "False":
                row = PodRow(s.name, s.node, s.revision, s.ready, "updating", str(gate.get("message") or ""))
            elif in_place_revision(raw) == update_hash:
                row = PodRow(s.name, s.node, s.revision, s.ready, "updated in place")
            else:
                row = PodRow(s.name, s.node, s.revision, s.ready, "updated", "created or recreated at the update revision")
        elif s.updating and not (w.kind is WorkloadKind.DAEMON_SET and (gate_of(raw) or {}).get("status") != "False"):
            gate = gate_of(raw) or {}
            row = PodRow(s.name, s.node, s.revision, s.ready, "updating", str(gate.get("message") or ""))
        else:
            t = why.get(s.name)
            keeper = w.kind is WorkloadKind.DAEMON_SET
            if keeper and turn_of(raw) == update_hash:
                row = PodRow(s.name, s.node, s.revision, s.ready, "waiting", "its turn (the keeper's): its node's agent takes it up within a second")
            elif t is not None and t.go and keeper:
                row = PodRow(s.name, s.node, s.revision, s.ready, "waiting", "next: the cluster's keeper gives it its turn (is the keeper running?)")
            elif t is not None and t.go:
                row = PodRow(s.name, s.node, s.revision, s.ready, "waiting", "its turn: its node's agent takes it up within a second")
            elif t is not None and t.reason.startswith("halted"):
                row = PodRow(s.name, s.node, s.revision, s.ready, "halted", t.reason)
            else:
                row = PodRow(s.name, s.node, s.revision, s.ready, "waiting", t.reason if t is not None else "")
        rows.append(row)
    return Status(w.key, update_hash, tuple(rows))


def table(st: Status) -> str:
    lines = [f"{st.workload}: update revision {st.update_revision}; {st.updated}/{len(st.rows)} pods updated"
             + (" — complete" if st.complete else "")]
    lines.append(f"  {'POD':<24} {'NODE':<20} {'READY':<6} {'STATE':<17} REASON")
    for r in st.rows:
        lines.append(f"  {r.pod:<24} {r.node:<20} {str(r.ready).lower():<6} {r.state:<17} {r.reason}")
    return "\n".join(lines)

