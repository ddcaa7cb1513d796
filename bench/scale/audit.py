"""Every request of the agents and the keeper, from the API server's audit log (level Metadata).

Each agent is told apart by its bound token's node-name claim (`authentication.kubernetes.io/node-name`
in the user's extra), the keeper by its ServiceAccount; every other user but the harness's admin (whose
requests the policy leaves out) is the control plane's own. One record per request (its auditID), at
the time the API server received it. `classify` is pure; `AuditTail` follows the file as it grows."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

AGENT_USER = "system:serviceaccount:kube-cgroup-agent:kube-cgroup-agent"
KEEPER_USER = "system:serviceaccount:kube-cgroup-agent:kube-cgroup-agent-vpa-admission"
NODE_CLAIM = "authentication.kubernetes.io/node-name"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READS = frozenset({"get", "list", "watch"})
REC_LEASE_PREFIX = "kcg-rec-"  # agent/recommender/publish.py: a VPA's holder's Lease
# the recommender's requests, by what they are for (agent/recommender/publish.py)
REC_HISTORY, REC_LEASE, REC_STATUS = "nodehistories", "leases kcg-rec-*", "verticalpodautoscalers/status"


@dataclass(frozen=True, slots=True)
class Record:
    at: float  # UNIX seconds the API server received the request
    who: str  # "agent:<node>", "keeper", or "other:<username>"
    verb: str
    resource: str  # "pods", "pods/resize", "nonresource"
    code: int
    target: str = ""  # "namespace/name" of the object, when the request names one


def who_of(user: dict[str, Any]) -> str:
    name = str(user.get("username", ""))
    if name == AGENT_USER:
        nodes = (user.get("extra") or {}).get(NODE_CLAIM) or ["?"]
        return f"agent:{nodes[0]}"
    if name == KEEPER_USER:
        return "keeper"
    return f"other:{name}"


def timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def classify(event: dict[str, Any]) -> tuple[str, Record] | None:
    """(auditID, the request) from one audit event; None for what is not a request's record."""
    if event.get("kind") != "Event" or "auditID" not in event:
        return None
    ref = event.get("objectRef") or {}
    resource = str(ref.get("resource") or "nonresource")
    if ref.get("subresource"):
        resource += "/" + str(ref["subresource"])
    code = int((event.get("responseStatus") or {}).get("code") or 0)
    at = timestamp(str(event.get("requestReceivedTimestamp") or event.get("stageTimestamp")))
    target = f"{ref.get('namespace', '')}/{ref['name']}" if ref.get("name") else ""
    return str(event["auditID"]), Record(at, who_of(event.get("user") or {}), str(event.get("verb", "")), resource,
                                         code, target)


def recommender_part(r: Record) -> str | None:
    """Which of the recommender's requests an agent's request is: its NodeHistory's (the write each interval,
    the holder's LIST), a VPA's Lease (`kcg-rec-<vpa>`: GET, renewal, release) or a VPA's status (the holder's
    patch); None for the agent's other requests (its one GET of its Node for the NodeHistory's owner is
    among those: the agent GETs its Node for other reasons too)."""
    if r.resource == REC_HISTORY:
        return REC_HISTORY
    if r.resource == "leases" and r.target.rpartition("/")[2].startswith(REC_LEASE_PREFIX):
        return REC_LEASE
    if r.resource == REC_STATUS:
        return REC_STATUS
    return None


def split_recommender(records: Iterable[Record]) -> tuple[list[Record], list[Record]]:
    """(the recommender's requests, the others)."""
    rec: list[Record] = []
    other: list[Record] = []
    for r in records:
        (rec if recommender_part(r) is not None else other).append(r)
    return rec, other


def tally_recommender(records: Iterable[Record]) -> dict[str, int]:
    """The recommender's requests by "verb part" ("update nodehistories", "get leases kcg-rec-*"...)."""
    c = Counter(f"{r.verb} {part}" for r in records if (part := recommender_part(r)) is not None)
    return dict(c.most_common())


def tally_status(records: Iterable[Record]) -> dict[str, int]:
    """The holder's VPA status patches by the VPA they changed ("namespace/name"), most first."""
    c = Counter(r.target for r in records if r.verb == "patch" and recommender_part(r) == REC_STATUS)
    return dict(c.most_common())


def patches_by_age(by_vpa: dict[str, int], held: set[str], aged: set[str]) -> dict[str, dict[str, int]]:
    """A holder's status patches (tally_status) summed for its aged VPAs (`aged`: their pods' histories
    seeded) and its young ones (the other VPAs it holds), with how many VPAs each."""
    return {"aged": {"vpas": len(held & aged), "patches": sum(v for k, v in by_vpa.items() if k in aged)},
            "young": {"vpas": len(held - aged), "patches": sum(v for k, v in by_vpa.items() if k not in aged)}}


def tally(records: Iterable[Record]) -> dict[str, int]:
    """Requests by "verb resource", most first."""
    c = Counter(f"{r.verb} {r.resource}" for r in records)
    return dict(c.most_common())


class AuditTail:
    """Follows the audit log in a thread; `records(...)` answers from what was read so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: set[str] = set()
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._offset = 0
        self._partial = b""
        self._thread = threading.Thread(target=self._run, name="audit-tail", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.poll()

    def poll(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        if not data:
            return
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        new: list[Record] = []
        for line in lines:
            try:
                got = classify(json.loads(line))
            except (ValueError, TypeError):
                continue
            if got is None or got[0] in self._seen:
                continue
            self._seen.add(got[0])
            new.append(got[1])
        with self._lock:
            self._records.extend(new)

    def records(self, t0: float = 0.0, t1: float = float("inf"), who: str = "") -> list[Record]:
        """Requests received in [t0, t1) by users whose name starts with `who`."""
        with self._lock:
            return [r for r in self._records if t0 <= r.at < t1 and r.who.startswith(who)]

    def first(self, who: str, verb: str, resource: str, since: float) -> Record | None:
        with self._lock:
            return next((r for r in self._records if r.at >= since and r.who == who and r.verb == verb
                         and r.resource == resource), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
