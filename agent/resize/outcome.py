"""What one actuation attempt of a pod found, from its plan and the values read back (pure)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agent.core.diff import FileDiff, Owner
from agent.core.plan import Plan
from agent.resize.state import Outcome


def waiting_outcome(containers: Collection[str]) -> Outcome:
    names = ", ".join(sorted(containers))
    return Outcome(
        reason="WaitingForRestart",
        message=f"container(s) {names} stopped for resize policy RestartContainer; waiting for the kubelet "
        "to start them with the new values",
    )


def read_back_outcome(
    plan: Plan, remaining: Sequence[FileDiff], restarting: Collection[str], include_containers: bool
) -> Outcome:
    """The pod is done only when the kernel shows its allocated values; otherwise why not yet: memory
    usage above a new limit, containers restarting, no runtime for the container values, or values
    still differing (actuating)."""
    if plan.blocked:
        return Outcome(reason="MemoryUsageAboveLimit", message=plan.blocked[0].message)
    if restarting:
        return waiting_outcome(restarting)
    if remaining and not include_containers and all(f.desired.owner is Owner.CONTAINER for f in remaining):
        return Outcome(reason="NoRuntime", message="no CRI endpoint: container values cannot be updated")
    if remaining:
        return Outcome(reason="Actuating", message=f"{len(remaining)} value(s) still differ from the allocation")
    return Outcome(done=True)
