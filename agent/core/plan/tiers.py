"""The qos-reserved tier limits: which tiers hold them and the rule that they move around every pod
memory step (shrinks first, lowest tier first; growth last)."""

from __future__ import annotations

from dataclasses import replace

from agent.core.diff import NodeDiff, Owner
from agent.core.model import TierKind
from agent.core.plan.values import _memory_limit_of
from cgroupfs import layout

MEMORY_LIMIT_FILES = frozenset({layout.MEMORY_LIMIT, layout.MEMORY_MAX})
_RESERVE_RANK = {TierKind.BEST_EFFORT: 0, TierKind.BURSTABLE: 1}  # lowest tier first


def reserve_tiers(node: NodeDiff) -> dict[str, int]:
    """The tiers whose memory limit qos-reserved sets (cgroup name -> rank, lowest tier 0)."""
    return {
        str(t.cgroup): _RESERVE_RANK[t.kind]
        for t in node.computation.tiers
        if t.kind in _RESERVE_RANK and t.values.memory_limit is not None
    }


def without_tier_memory_growth(node: NodeDiff) -> NodeDiff:
    """`node` with the qos-reserved tier limits that would grow left where they are: while a pod's
    admitted change is still being actuated, the lower tiers do not take back what it may still hold."""
    reserve = reserve_tiers(node)
    files = []
    for f in node.files:
        if (
            f.differs
            and f.desired.owner is Owner.TIER
            and str(f.setting.cgroup) in reserve
            and f.setting.filename in MEMORY_LIMIT_FILES
            and _memory_limit_of({f.setting.filename: f.setting.value})
            > _memory_limit_of({f.setting.filename: f.current})
        ):
            f = replace(f, differs=False)
        files.append(f)
    return replace(node, files=tuple(files))
