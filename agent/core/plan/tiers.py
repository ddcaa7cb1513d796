"""The qos-reserved tier limits: which tiers hold them and the rule that they move around every pod
memory step (shrinks first, lowest tier first; growth last)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from agent.core.diff import NodeDiff, Owner
from agent.core.model import Problem, TierKind
from agent.core.plan.types import INF
from agent.core.plan.values import _memory_limit_of, _memory_usage
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


def settle_negative_limits(node: NodeDiff, extra: Mapping[str, str | None]) -> tuple[NodeDiff, tuple[Problem, ...]]:
    """`node` with a qos-reserved tier limit below zero replaced by the tier's usage: the kubelet's
    retrySetMemoryReserve for a value no kernel takes.

    Why: the tiers are summed over the pods as they ask, so a memory growth not admitted (Infeasible, or
    not yet) can take the higher tiers' requests past allocatable and the formula below zero. The kernel
    refuses such a limit (EINVAL), and the kubelet then sets the tier at its usage, which stops its growth;
    a systemd unit would take the same negative value as an unsigned one, no limit at all. So the plan
    writes the usage directly, through every driver; with no usage read, the limit is left as it is."""
    reserve = reserve_tiers(node)
    files = []
    notes: list[Problem] = []
    for f in node.files:
        name = f.setting.filename
        if (
            f.desired.owner is Owner.TIER
            and str(f.setting.cgroup) in reserve
            and name in MEMORY_LIMIT_FILES
            and _below_zero(f.setting.value)
        ):
            usage = _memory_usage(f.setting, extra)
            what = (
                f"QoS tier {f.setting.cgroup}: its qos-reserved memory limit {f.setting.value} is below zero "
                "(the memory the higher tiers' pods ask for exceeds allocatable: a growth not admitted counts "
                "as it asks)"
            )
            if usage is None or usage == INF:
                notes.append(Problem(None, f"{what}; its usage could not be read: left as it is"))
                f = replace(f, differs=False)
            else:
                at = str(int(usage))
                notes.append(Problem(None, f"{what}; set at its usage {at}, as the kubelet does"))
                setting = replace(f.setting, value=at)
                f = replace(f, desired=replace(f.desired, setting=setting), differs=at != f.current)
        files.append(f)
    if not notes:
        return node, ()
    return replace(node, files=tuple(files)), tuple(notes)


def _below_zero(value: str) -> bool:
    """A limit the kernel refuses: negative, other than -1 (v1's own word for no limit)."""
    try:
        return int(value) < -1
    except ValueError:
        return False
