"""The journal of a resize node — every agent cgroup write, runtime update and container stop as an
`Event` — and the kubelet's ordering rules (anchors §2.3) checked over one resize's events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.resize.invariant import memory_limit


@dataclass
class Event:
    kind: str  # "write" (agent, pod/tier file), "update" (runtime, container), "stop"
    target: str  # path, or pod/container
    value: Any = None
    old: Any = None


def signature(event: Event) -> tuple[str, str, int] | None:
    """(who, resource, +1 grow / -1 shrink) of one event; None when it changed nothing."""
    if event.kind == "stop":
        return ("stop:" + event.target.split("/", 1)[1], "restart", 0)
    if event.kind == "update":
        (oc, om, os_), (nc, nm, ns) = event.old, event.value
        who = "ctr:" + event.target.split("/", 1)[1]
        if nm != om:
            return (who, "memory", 1 if nm > om else -1)
        if nc != oc:
            return (who, "cpu", 1 if nc > oc else -1)
        if ns != os_:
            return (who, "cpu", 1 if ns > os_ else -1)
        return None
    path: str = event.target
    resource = "memory" if path.startswith("memory/") else "cpu"
    who = "pod" if "/pod" in path else "tier"
    old, new = event.old, event.value
    if path.endswith("memory.limit_in_bytes"):
        o, n = memory_limit(old), memory_limit(new)
    else:
        o, n = float(int(old)), float(int(new))
        if path.endswith("cfs_quota_us"):
            o = float("inf") if o < 0 else o
            n = float("inf") if n < 0 else n
    if o == n:
        return None
    return (who, resource, 1 if n > o else -1)


def assert_kubelet_order(events: list[Event], *, phases: bool = True) -> list[tuple[str, str, int]]:
    """The ordering rules of anchors §2.3 over one resize's events; returns the signatures.

    Per resource: a growing pod limit before any container increase, container decreases before the
    pod shrinks, container decreases before increases; memory's phase entirely before CPU's (`phases`)."""
    sigs = [s for s in (signature(e) for e in events) if s is not None]
    for resource in ("memory", "cpu"):
        idx = [(i, s) for i, s in enumerate(sigs) if s[1] == resource]
        pod_up = [i for i, s in idx if s[0] == "pod" and s[2] > 0]
        pod_down = [i for i, s in idx if s[0] == "pod" and s[2] < 0]
        c_up = [i for i, s in idx if s[0].startswith("ctr:") and s[2] > 0]
        c_down = [i for i, s in idx if s[0].startswith("ctr:") and s[2] < 0]
        assert all(g < u for g in pod_up for u in c_up), (resource, sigs)
        assert all(d < s for d in c_down for s in pod_down), (resource, sigs)
        assert all(d < u for d in c_down for u in c_up), (resource, sigs)
    if phases:
        mem = [i for i, s in enumerate(sigs) if s[1] == "memory"]
        cpu = [i for i, s in enumerate(sigs) if s[1] == "cpu"]
        assert not mem or not cpu or max(mem) < min(cpu), sigs
    return sigs
