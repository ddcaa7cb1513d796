"""Narrowing a node diff to the pods being acted on, and the resize-policy decision (pure).

`restrict` keeps every cgroup visible (so the invariant check still sees the whole tree) but freezes
the pods not selected at their current values: they produce no steps. `restarts_for` applies the resize
policy: a container whose changing resource says RestartContainer is restarted instead of updated in
place (RestartContainer wins over NotRequired when both resources change).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from agent.core.diff import FileDiff, NodeDiff, Owner
from agent.core.model import PodView, ResizePolicy
from agent.core.plan import resource_of


def _frozen(f: FileDiff) -> FileDiff | None:
    if f.current is None:
        return None
    if not f.differs:  # already at its value: frozen as it is
        return f
    setting = replace(f.setting, value=f.current)
    return FileDiff(replace(f.desired, setting=setting), f.current, False, f.dir_exists)


def restrict(
    node: NodeDiff,
    pods: Collection[str] | None,
    *,
    exclude: Collection[str] = (),
    tiers: bool = True,
    frozen_containers: Collection[tuple[str, str]] = (),
) -> NodeDiff:
    """The diff with changes kept only for `pods` (keys; None = every pod) minus `exclude`, the tiers
    when `tiers`, and not for `frozen_containers` ((pod, container) pairs)."""
    out: list[FileDiff] = []
    for f in node.files:
        d = f.desired
        if d.owner is Owner.TIER:
            keep = tiers
        else:
            keep = (pods is None or d.pod in pods) and d.pod not in exclude
            if keep and d.owner is Owner.CONTAINER and (d.pod or "", d.container or "") in frozen_containers:
                keep = False
        if keep:
            out.append(f)
        else:
            frozen = _frozen(f)
            if frozen is not None:
                out.append(frozen)
    return NodeDiff(tuple(out), node.warnings, node.errors, node.computation)


def restarts_for(node: NodeDiff, pod: PodView, already: Collection[str]) -> set[tuple[str, str]]:
    """(pod key, container) pairs to restart: a resource with RestartContainer changes for them, and
    they were not already restarted for this allocation."""
    policies = {c.name: c.resize_policy for c in (*pod.containers, *pod.init_containers)}
    out: set[tuple[str, str]] = set()
    for f in node.changes:
        d = f.desired
        if d.owner is not Owner.CONTAINER or d.pod != pod.key or d.container is None:
            continue
        if d.container in already:
            continue
        resource = resource_of(d.setting)
        if resource == "hugetlb":
            continue
        if policies.get(d.container, {}).get(resource) is ResizePolicy.RESTART_CONTAINER:
            out.add((pod.key, d.container))
    return out
