"""Drift: a value the agent wrote, changed back by someone else. Pure bookkeeping, no I/O.

Why: the agent and another writer (a kubelet's 60 s QoS pass, systemd re-applying unit properties, a
runtime, an operator with echo) can undo each other forever. The agent re-applies a reverted value with
exponential backoff; after `max_reverts` reverts it stops fighting, says so once with the likely owner,
and waits until the value it wants changes (a new pod spec) or the other writer goes away.

A pod's files carry an epoch, the pod's `metadata.generation`: a kubelet that resizes pods in place
rewrites the pod cgroup from the new spec, so a change that follows a new generation is the kubelet
doing its job, not drift. The agent writes its own value again (the pod-level annotation's limit) and
counts nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from agent.core.ownership import Thing


class Action(enum.StrEnum):
    APPLY = "apply"  # write it (a new desired value, or a revert whose backoff has passed)
    HOLD = "hold"  # reverted, and the backoff has not passed yet: write later
    YIELD = "yield"  # reverted too often: stop fighting now, warn once
    YIELDED = "yielded"  # already given up on this value: stay quiet


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reverts: int = 0
    wait_s: float = 0.0
    drift: bool = False  # True when the difference is someone else's change, not a new desired value


@dataclass(slots=True)
class _Record:
    desired: str
    epoch: int | None = None  # the pod's generation the record belongs to (None: not a pod's file)
    written_at: float | None = None  # when the agent last wrote `desired`
    reverts: int = 0
    counted: bool = False  # the current revert is already counted (not written since)
    yielded: bool = False


class DriftTracker:
    def __init__(self, max_reverts: int = 3, backoff_s: float = 10.0, cap_s: float = 600.0) -> None:
        self.max_reverts = max_reverts
        self.backoff_s = backoff_s
        self.cap_s = cap_s
        self._records: dict[str, _Record] = {}
        self._contested: set[str] = set()  # paths whose record counts reverts or is yielded

    def decide(self, path: str, desired: str, now: float, epoch: int | None = None) -> Decision:
        """For a file whose current value differs from `desired`; `epoch` is the pod's generation for a
        pod's file (a new one starts a new record: the kubelet's resize is not a revert)."""
        rec = self._records.get(path)
        if rec is None or rec.desired != desired or (epoch is not None and rec.epoch != epoch):
            self._records[path] = _Record(desired, epoch)
            self._contested.discard(path)
            return Decision(Action.APPLY)
        if rec.written_at is None:
            return Decision(Action.APPLY)  # never written successfully: not drift, a retry
        if not rec.counted:
            rec.reverts += 1
            rec.counted = True
            self._contested.add(path)
        if rec.yielded:
            return Decision(Action.YIELDED, rec.reverts, drift=True)
        if rec.reverts > self.max_reverts:
            rec.yielded = True
            return Decision(Action.YIELD, rec.reverts, drift=True)
        due = rec.written_at + min(self.cap_s, self.backoff_s * 2 ** (rec.reverts - 1))
        if now < due:
            return Decision(Action.HOLD, rec.reverts, due - now, drift=True)
        return Decision(Action.APPLY, rec.reverts, drift=True)

    def changed_behind(self, path: str, desired: str, epoch: int | None = None) -> bool:
        """Whether a difference is someone else's change to a value the agent wrote (what `decide` would
        count as drift), without counting it."""
        rec = self._records.get(path)
        return (rec is not None and rec.desired == desired and (epoch is None or rec.epoch == epoch)
                and rec.written_at is not None)

    def wrote(self, path: str, value: str, now: float) -> None:
        rec = self._records.get(path)
        if rec is None or rec.desired != value:
            rec = self._records[path] = _Record(value)
            self._contested.discard(path)
        rec.written_at = now
        rec.counted = False

    def converged(self, path: str, desired: str) -> None:
        """The file holds the desired value: a yielded value that came back is fought for again, and the
        record of an older value is dropped. Why the latter: another writer may have set the very value
        the agent came to want (the kubelet's QoS pass on a pod's arrival); the agent's earlier write is
        then behind it, and the file moving off the new value later is not a revert of that write."""
        rec = self._records.get(path)
        if rec is None:
            return
        if rec.desired != desired:
            del self._records[path]
            self._contested.discard(path)
        elif rec.yielded:
            rec.yielded = False
            rec.reverts = 0
            self._contested.discard(path)

    def forget(self, paths: Iterable[str]) -> None:
        for p in paths:
            self._records.pop(p, None)
            self._contested.discard(p)

    def forget_under(self, directory_part: str) -> None:
        """Drop every record whose path holds `directory_part` (a departed pod's `pod<uid>`)."""
        for p in [p for p in self._records if f"/{directory_part}" in p]:
            del self._records[p]
            self._contested.discard(p)

    @property
    def yielded(self) -> tuple[str, ...]:
        return tuple(sorted(p for p, r in self._records.items() if r.yielded))

    def contested(self) -> dict[str, dict[str, Any]]:
        """The records worth keeping across a restart: values someone else changed back (reverts
        counted, or yielded). A record of a plain write is not: after a restart the next write simply
        records it again. Kept as a set as they change, so a pass pays O(contested), not O(every path
        ever written)."""
        return {p: asdict(self._records[p]) for p in sorted(self._contested)}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """For the checkpoint. `written_at` is a monotonic time, meaningless after a restart: the
        next process treats a restored record as written long ago (its backoff has passed)."""
        return {p: asdict(r) for p, r in self._records.items()}

    def restore(self, data: Mapping[str, Mapping[str, Any]]) -> None:
        for path, raw in data.items():
            try:
                epoch = raw.get("epoch")
                self._records[str(path)] = _Record(
                    desired=str(raw["desired"]),
                    epoch=int(epoch) if epoch is not None else None,
                    written_at=float("-inf") if raw.get("written_at") is not None else None,
                    reverts=int(raw.get("reverts", 0)),
                    counted=bool(raw.get("counted", False)),
                    yielded=bool(raw.get("yielded", False)),
                )
                if self._records[str(path)].reverts or self._records[str(path)].yielded:
                    self._contested.add(str(path))
            except (KeyError, TypeError, ValueError):
                continue  # one bad record does not lose the others


def reserved_gap(thing: Thing, current: str | None, desired: str, percent: int | None) -> str:
    """For a tier's qos-reserved memory limit that someone else changed, what the change means in memory
    requests: the kubelet's QoS pass sets the same limit from its own list of active pods (allocatable less
    `percent` of the requests above the tier), so the gap names the requests of the pod the two lists
    disagree on. Empty for anything else, and for a value that is not a number ("max")."""
    if thing is not Thing.QOS_RESERVED_MEMORY or not percent or current is None:
        return ""
    try:
        gap = (int(desired) - int(current)) * 100 // percent
    except ValueError:
        return ""
    if gap == 0:
        return ""
    more = "more" if gap > 0 else "less"
    return (
        f"; that writer counted about {abs(gap) / (1 << 20):.1f} MiB {more} of memory requests than the agent"
        f" (qosReserved memory {percent} %)"
    )


def likely_owner(thing: Thing, filename: str, systemd_driver: bool) -> str:
    """Who most likely changed a value back, for the one warning the agent gives."""
    if systemd_driver and not filename.startswith("hugetlb"):
        return "systemd (it re-applies the slice's unit properties) or the kubelet"
    if thing in (Thing.QOS_TIERS, Thing.QOS_RESERVED_MEMORY):
        return "the kubelet's QoS container manager (it rewrites the tiers every 60 s)"
    if thing is Thing.CONTAINER_RESIZES:
        return "the container runtime or the kubelet (an in-place resize of its own)"
    return "the kubelet's pod container manager (it writes pod cgroups on start and resize)"
