"""What the pod's status tells the VPA source (pure): its age, a quick OOM, and the kubelet's
PodResizePending condition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agent.infra.durations import parse_timestamp
from agent.vpa.policy import ResizeBlock

QUICK_OOM_S: Final = 600.0  # EvictAfterOOMThreshold, updater config.go
RESIZE_PENDING: Final = "PodResizePending"  # the kubelet's condition (reason Deferred or Infeasible), v1.33+


def resize_pending(raw: Mapping[str, Any]) -> tuple[ResizeBlock, str] | None:
    """The kubelet's PodResizePending condition (reason Deferred or Infeasible), or None."""
    status = raw.get("status")
    for cond in (status.get("conditions") or []) if isinstance(status, Mapping) else []:
        if isinstance(cond, Mapping) and cond.get("type") == RESIZE_PENDING and cond.get("status") == "True":
            reason = cond.get("reason")
            if reason in (ResizeBlock.INFEASIBLE.value, ResizeBlock.DEFERRED.value):
                return ResizeBlock(str(reason)), str(cond.get("message") or "")
    return None


def age_s(raw: Mapping[str, Any], now: float) -> float | None:
    status = raw.get("status")
    start = parse_timestamp(status.get("startTime")) if isinstance(status, Mapping) else None
    return None if start is None else now - start


def quick_oom(raw: Mapping[str, Any]) -> bool:
    """A container OOM-killed within QUICK_OOM_S of its start (the updater's quick OOM)."""
    status = raw.get("status")
    for cs in (status.get("containerStatuses") or []) if isinstance(status, Mapping) else []:
        last = cs.get("lastState") if isinstance(cs, Mapping) else None
        term = last.get("terminated") if isinstance(last, Mapping) else None
        if isinstance(term, Mapping) and term.get("reason") == "OOMKilled":
            started, finished = (
                parse_timestamp(term.get("startedAt")),
                parse_timestamp(term.get("finishedAt")),
            )
            if started is not None and finished is not None and finished - started < QUICK_OOM_S:
                return True
    return False
