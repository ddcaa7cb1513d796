"""What of a diff the agent may write now: the things it owns, less the values it holds back because
someone else keeps changing them (drift backoff) or gave up on (yielded). Shared by both reconcilers, so
a value fought over is handled the same whichever runs the pass. No I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from agent.core.compute import NodeComputation
from agent.core.diff import DesiredFile, FileDiff, NodeDiff
from agent.core.diff import Owner as FileOwner
from agent.core.model import TierKind
from agent.core.ownership import Owner, Ownership, Thing
from agent.core.plan import MEMORY_LIMIT_FILES, CgroupStep, ContainerStep, Step
from agent.daemon.drift import Action, DriftTracker, likely_owner, reserved_gap
from agent.daemon.reconciler import DriftNote
from cgroupfs import layout

_LIMIT_FILES = frozenset(
    {layout.CPU_QUOTA, layout.CPU_PERIOD, layout.CPU_MAX, layout.MEMORY_LIMIT, layout.MEMORY_MAX}
)


def thing_of(f: FileDiff, pod_level_limits: bool) -> Thing:
    """Which managed thing a file belongs to (the ownership table's rows)."""
    return thing_of_desired(f.desired, pod_level_limits)


def thing_of_desired(d: DesiredFile, pod_level_limits: bool) -> Thing:
    owner, name = d.owner, d.setting.filename
    if owner is FileOwner.TIER:
        is_node = d.setting.cgroup.parts[-1:] == (TierKind.NODE.value,)
        return Thing.QOS_RESERVED_MEMORY if name in MEMORY_LIMIT_FILES and not is_node else Thing.QOS_TIERS
    if owner is FileOwner.CONTAINER:
        return Thing.CONTAINER_RESIZES
    return Thing.POD_LEVEL_LIMITS if pod_level_limits and name in _LIMIT_FILES else Thing.POD_CGROUPS


def _pods_with_pod_level_limits(comp: NodeComputation) -> frozenset[str]:
    """The pods (keys) whose pod cgroup limits come from pod-level resources, not from their containers."""
    return frozenset(p.pod.key for p in comp.pods if p.pod.pod_limits is not None)


@dataclass(frozen=True, slots=True)
class Gated:
    node: NodeDiff
    notes: tuple[DriftNote, ...]
    warnings: tuple[str, ...]
    hold_s: float | None


def written(step: Step) -> list[tuple[str, str]]:
    """(path, value) of what a successful step wrote (a container step: its container's files)."""
    if isinstance(step, CgroupStep):
        return [(step.path, step.setting.value)]
    if isinstance(step, ContainerStep):
        return [(c.setting.path, c.setting.value) for c in step.changes]
    return []


class Gate:
    def __init__(
        self,
        ownership: Ownership,
        drift: DriftTracker,
        systemd: bool,
        lock: threading.RLock | None = None,
        qos_reserved_memory_percent: int | None = None,
    ) -> None:
        self.ownership = ownership
        self.drift = drift
        self.systemd = systemd
        self.reserved_percent = qos_reserved_memory_percent  # to say what a changed tier limit means
        self._lock = lock or threading.RLock()
        self.lock = self._lock
        self._observed: set[tuple[str, str | None]] = set()
        # why the agent's view of the pods may be behind (its watch broken): a value changed meanwhile may
        # be the kubelet acting on what the agent has not seen (a resize it actuated, its status not
        # posted), so it is not put back, nor counted as a revert, until the view is current (None)
        self.behind: str | None = None

    def wrote(self, pairs: list[tuple[str, str]], now: float) -> None:
        with self._lock:
            for path, value in pairs:
                self.drift.wrote(path, value, now)

    def owned(self, node: NodeDiff) -> Gated:
        """Keep only the differences the agent owns: what the kubelet owns is observed, never written
        (a value owned as `observe` is reported once per value it takes). No drift bookkeeping: this runs
        on every pass, a pod's own resize included."""
        files: list[FileDiff] = []
        notes: list[DriftNote] = []
        pod_level = _pods_with_pod_level_limits(node.computation)
        with self._lock:
            for f in node.files:
                if f.differs and self._not_mine(f, pod_level, notes):
                    files.append(replace(f, differs=False))
                else:
                    files.append(f)
        return Gated(NodeDiff(tuple(files), node.warnings, node.errors, node.computation), tuple(notes), (), None)

    def to_read(self, wanted: Sequence[DesiredFile], comp: NodeComputation) -> list[DesiredFile]:
        """The files worth reading: not those the kubelet owns (never written, their differences not
        reported), so a kubelet-owned node's resync reads the tiers and what the agent owns, not every
        pod's and container's files."""
        if all(self.ownership.owner(t) is not Owner.KUBELET for t in Thing):
            return list(wanted)
        pod_level = _pods_with_pod_level_limits(comp)
        owner = self.ownership.owner
        return [d for d in wanted if owner(thing_of_desired(d, d.pod in pod_level)) is not Owner.KUBELET]

    def _not_mine(self, f: FileDiff, pod_level: frozenset[str], notes: list[DriftNote]) -> bool:
        thing = thing_of(f, f.desired.pod in pod_level)
        owner = self.ownership.owner(thing)
        if owner is Owner.AGENT:
            return False
        path = f.setting.path
        if owner is Owner.OBSERVE and (path, f.current) not in self._observed:
            self._observed.add((path, f.current))
            notes.append(
                DriftNote(thing.value, path, "observed", f"{path} is {f.current}, the agent would write {f.setting.value}")
            )
        return True

    def filter(self, node: NodeDiff, now: float) -> Gated:
        """Keep the differences the agent owns and is not holding back (drift backoff, yielded)."""
        files: list[FileDiff] = []
        notes: list[DriftNote] = []
        warnings: list[str] = []
        hold: float | None = None
        systemd = self.systemd
        pod_level = _pods_with_pod_level_limits(node.computation)
        generations = {p.pod.key: p.pod.generation for p in node.computation.pods}
        with self._lock:
            for f in node.files:
                path = f.setting.path
                if not f.differs:
                    self.drift.converged(path, f.setting.value)
                    files.append(f)
                    continue
                if self._not_mine(f, pod_level, notes):
                    files.append(replace(f, differs=False))
                    continue
                thing = thing_of(f, f.desired.pod in pod_level)
                epoch = generations.get(f.desired.pod or "") if f.desired.owner is FileOwner.POD else None
                if self.behind is not None and self.drift.changed_behind(path, f.setting.value, epoch):
                    files.append(replace(f, differs=False))
                    notes.append(DriftNote(thing.value, path, "held", f"{path} was changed to {f.current}; not "
                                           f"re-applied while the agent's view of the pods is behind ({self.behind})"))
                    continue
                decision = self.drift.decide(path, f.setting.value, now, epoch)
                if decision.action is Action.APPLY:
                    files.append(f)
                    if decision.drift:
                        notes.append(
                            DriftNote(
                                thing.value,
                                path,
                                "reapplied",
                                f"{path} was changed to {f.current}; re-applying {f.setting.value} "
                                f"(revert {decision.reverts} of {self.drift.max_reverts})"
                                + reserved_gap(thing, f.current, f.setting.value, self.reserved_percent),
                                decision.reverts,
                            )
                        )
                    continue
                files.append(replace(f, differs=False))
                if decision.action is Action.HOLD:
                    hold = decision.wait_s if hold is None else min(hold, decision.wait_s)
                    notes.append(
                        DriftNote(
                            thing.value,
                            path,
                            "held",
                            f"{path} reverted again; re-applying in {decision.wait_s:.0f}s",
                        )
                    )
                elif decision.action is Action.YIELD:
                    who = likely_owner(thing, f.setting.filename, systemd)
                    message = (
                        f"{path} was changed back {decision.reverts} times (now {f.current}, the agent wants "
                        f"{f.setting.value}{reserved_gap(thing, f.current, f.setting.value, self.reserved_percent)});"
                        f" the agent stops writing it. Likely owner: {who}. Set ownership "
                        f"{thing.value} to kubelet or observe, or stop the other writer."
                    )
                    notes.append(DriftNote(thing.value, path, "yielded", message))
                    warnings.append(message)
        return Gated(
            NodeDiff(tuple(files), node.warnings, node.errors, node.computation),
            tuple(notes),
            tuple(warnings),
            hold,
        )
