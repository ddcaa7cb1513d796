"""The diff grouped per cgroup (a tier, a pod, a container) with its current and desired limits, and how one
cgroup's writes are ordered within itself (CFS period vs quota, memory+swap vs memory)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from agent.core.diff import FileDiff, NodeDiff, Owner
from agent.core.model import UNLIMITED, ContainerID, ContainerValues, PodUID
from agent.core.plan.types import INF, CgroupStep, ContainerStep, Resource
from agent.core.plan.values import _cpu_limit_of, _int, _memory_limit_of, _memory_usage
from cgroupfs import layout
from cgroupfs.convert import PAGE_SIZE, parse_cpu_max
from cgroupfs.layout import FileSetting
from cgroupfs.types import CgroupName, CgroupVersion, Controller


def resource_of(setting: FileSetting) -> Resource:
    if setting.controller is Controller.MEMORY:
        return "memory"
    if setting.controller is Controller.CPU:
        return "cpu"
    return "hugetlb"


# ---------------------------------------------------------------------------------------------
# Reading limits out of a cgroup's files (current or desired side)


@dataclass(slots=True)
class _Group:
    """All files of one cgroup (tier, pod or container), current and desired."""

    key: tuple[str, str, str]
    owner: Owner
    cgroup: CgroupName
    depth: int
    pod: str | None
    pod_uid: PodUID | None
    container: str | None
    container_id: ContainerID | None
    files: dict[str, FileDiff] = field(default_factory=dict)

    def text(self, filename: str, new: bool) -> str | None:
        f = self.files.get(filename)
        if f is None:
            return None
        return f.setting.value if new else f.current

    def texts(self, new: bool) -> dict[str, str | None]:
        return {name: self.text(name, new) for name in self.files}

    def cpu_limit(self, new: bool) -> float:
        """quota/period, INF for unlimited or unknown (the kernel default)."""
        return _cpu_limit_of(self.texts(new))

    def cpu_weight(self, new: bool) -> float:
        for name in (layout.CPU_SHARES, layout.CPU_WEIGHT):
            value = _int(name, self.text(name, new))
            if value is not None:
                return value
        return 0.0

    def memory_limit(self, new: bool) -> float:
        return _memory_limit_of(self.texts(new))

    def memory_reservation(self, new: bool) -> float:
        for name in (layout.MEMORY_SOFT, layout.MEMORY_LOW):
            value = _int(name, self.text(name, new))
            if value is not None:
                return value
        return 0.0

    def direction(self, resource: Resource) -> int:
        """+1 grows, -1 shrinks, 0 neither (by limit first, then by the request-like value)."""
        if resource == "cpu":
            old, new = self.cpu_limit(False), self.cpu_limit(True)
            if old == new:
                old, new = self.cpu_weight(False), self.cpu_weight(True)
        elif resource == "memory":
            old, new = self.memory_limit(False), self.memory_limit(True)
            if old == new:
                old, new = self.memory_reservation(False), self.memory_reservation(True)
        else:
            return 0
        return (new > old) - (new < old)

    def changed(self, resource: Resource) -> list[FileDiff]:
        return [f for f in self.files.values() if f.differs and resource_of(f.setting) == resource]


def _groups(node: NodeDiff) -> dict[tuple[str, str, str], _Group]:
    groups: dict[tuple[str, str, str], _Group] = {}
    for f in node.files:
        d = f.desired
        key = (d.owner.value, str(d.setting.cgroup), d.container or "")
        g = groups.get(key)
        if g is None:
            depth = len(d.setting.cgroup.parts) + (1 if d.owner is Owner.CONTAINER else 0)
            g = groups[key] = _Group(
                key, d.owner, d.setting.cgroup, depth, d.pod, d.pod_uid, d.container, d.container_id
            )
        g.files[d.setting.filename] = f
    return groups


# ---------------------------------------------------------------------------------------------
# Ordering inside one cgroup


def _ordered_cgroup_writes(
    g: _Group, resource: Resource, extra: Mapping[str, str | None]
) -> list[CgroupStep]:
    changed = g.changed(resource)
    if not changed:
        return []
    by_name = {f.setting.filename: f for f in changed}

    def step(f: FileDiff) -> CgroupStep:
        return CgroupStep(f.setting, f.current, resource, g.owner, g.pod)

    out: list[CgroupStep] = []
    if resource == "cpu" and layout.CPU_QUOTA in by_name and layout.CPU_PERIOD in by_name:
        # The kernel checks quota/period ratios against parent and children: take the path whose
        # intermediate ratio lies between the old and the new one.
        q_old = _int(layout.CPU_QUOTA, g.text(layout.CPU_QUOTA, False))
        q_new = _int(layout.CPU_QUOTA, g.text(layout.CPU_QUOTA, True))
        p_old = _int(layout.CPU_PERIOD, g.text(layout.CPU_PERIOD, False)) or 100000.0
        p_new = _int(layout.CPU_PERIOD, g.text(layout.CPU_PERIOD, True)) or 100000.0

        def ratio(q: float | None, p: float) -> float:
            return INF if q is None or q < 0 or q == INF else q / p

        lo, hi = sorted((ratio(q_old, p_old), ratio(q_new, p_new)))
        quota_first = lo <= ratio(q_new, p_old) <= hi
        first, second = (
            (layout.CPU_QUOTA, layout.CPU_PERIOD) if quota_first else (layout.CPU_PERIOD, layout.CPU_QUOTA)
        )
        rest = [f for n, f in by_name.items() if n not in (first, second)]
        out.extend(step(f) for f in rest)
        out.extend((step(by_name[first]), step(by_name[second])))
        return out
    if resource == "memory" and layout.MEMORY_LIMIT in by_name:
        f = by_name[layout.MEMORY_LIMIT]
        memsw_path = f"{f.setting.directory}/{layout.MEMORY_MEMSW}"
        memsw = _int(layout.MEMORY_MEMSW, extra.get(memsw_path))
        new = _int(layout.MEMORY_LIMIT, f.setting.value)
        if memsw is not None and new is not None and memsw != INF and new > memsw:
            # memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes: raise it first.
            ms = replace(f.setting, filename=layout.MEMORY_MEMSW, value=f.setting.value)
            out.append(CgroupStep(ms, extra.get(memsw_path), resource, g.owner, g.pod))
    out.extend(step(f) for f in changed)
    return out


def _usage(g: _Group, extra: Mapping[str, str | None]) -> float | None:
    for f in g.files.values():
        if f.setting.controller is Controller.MEMORY:
            return _memory_usage(f.setting, extra)
    return None


def usage_paths(node: NodeDiff) -> tuple[str, ...]:
    """Extra files `plan` reads: memory usage and v1 memory+swap of every cgroup whose memory changes."""
    return usage_paths_of(f.setting for f in node.changes)


def usage_paths_of(settings: Iterable[FileSetting]) -> tuple[str, ...]:
    """Memory usage and v1 memory+swap of the cgroups these memory files are in."""
    out: dict[str, None] = {}
    for s in settings:
        if s.controller is Controller.MEMORY:
            if s.version is CgroupVersion.V1:
                out[f"{s.directory}/{layout.MEMORY_USAGE_V1}"] = None
                out[f"{s.directory}/{layout.MEMORY_MEMSW}"] = None
            else:
                out[f"{s.directory}/{layout.MEMORY_CURRENT}"] = None
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Building the plan


def _container_values(
    g: _Group, desired: ContainerValues, resource: Resource, parent: _Group | None = None
) -> ContainerValues:
    """The full set to send: the resource being changed at its new value; during the memory phase the
    CPU limit stays at its current value so that CPU changes keep their own ordering."""
    if resource != "memory":
        return _desired_cpu(g, desired, parent)
    current_quota = g.text(layout.CPU_QUOTA, False)
    current_period = g.text(layout.CPU_PERIOD, False)
    if layout.CPU_MAX in g.files:
        text = g.text(layout.CPU_MAX, False)
        if text is not None:
            try:
                q, p = parse_cpu_max(text)
            except ValueError:
                return desired
            return replace(desired, cpu_quota=q if q > 0 else UNLIMITED, cpu_period=p)
        return desired
    try:
        quota = int(current_quota) if current_quota is not None else desired.cpu_quota
        period = int(current_period) if current_period is not None else desired.cpu_period
    except ValueError:
        return desired
    return replace(desired, cpu_quota=quota, cpu_period=period)


def _desired_cpu(g: _Group, desired: ContainerValues, parent: _Group | None) -> ContainerValues:
    """The CPU limit to send as the container's files should hold it: under the systemd driver the rounded
    quota systemd keeps (cgroupfs.systemd.grain), so that a runtime which writes the exact quota to the file
    (runc < 1.3.2) writes the value systemd keeps and a daemon-reload changes nothing; elsewhere the same.
    The exact quota instead while the pod cgroup holds less than the rounded one when this step runs (an exact
    writer's pod, not re-applied since): the kernel refuses a child above its parent."""
    try:
        if (text := g.text(layout.CPU_MAX, True)) is not None:
            q, p = parse_cpu_max(text)
        else:
            quota, period = g.text(layout.CPU_QUOTA, True), g.text(layout.CPU_PERIOD, True)
            if quota is None or period is None:
                return desired
            q, p = int(quota), int(period)
    except ValueError:
        return desired
    if q > 0 and parent is not None and q / p > _limit_when_written(parent):
        return desired
    return replace(desired, cpu_quota=q if q > 0 else UNLIMITED, cpu_period=p)


def _limit_when_written(parent: _Group) -> float:
    """The pod's CPU limit when its containers' CPU steps run: grown before them, shrunk after them."""
    if parent.changed("cpu"):
        return max(parent.cpu_limit(False), parent.cpu_limit(True))
    return parent.cpu_limit(False)


def _reclaim_target(usage: float, new_limit: float, current: float) -> int | None:
    """Seed 000's step toward usage: a limit a little above usage (5%, whole pages) so the kernel reclaims
    page cache down to it; None when that would not lower the current limit."""
    target = max(new_limit, usage + usage / 20)
    target = math.ceil(target / PAGE_SIZE) * PAGE_SIZE
    return int(target) if target < current else None


def _reclaim_container_step(
    g: _Group, target: int, desired: Mapping[tuple[str, str], ContainerValues]
) -> ContainerStep:
    """An UpdateContainerResources that lowers only the memory limit, to `target`: everything else
    stays at its current value."""
    assert g.pod is not None and g.container is not None and g.pod_uid is not None
    assert g.container_id is not None
    values = desired.get((g.pod, g.container))
    f = g.files.get(layout.MEMORY_LIMIT) or g.files.get(layout.MEMORY_MAX)
    assert values is not None and f is not None
    current = _current_container_values(g, values)
    change = FileDiff(replace(f.desired, setting=replace(f.setting, value=str(target))), f.current, True)
    return ContainerStep(
        g.pod,
        g.pod_uid,
        g.container,
        g.container_id,
        "memory",
        (change,),
        replace(current, memory_limit=target),
    )


def _current_container_values(g: _Group, desired: ContainerValues) -> ContainerValues:
    """The container's values as its cgroup shows them now (desired where a file is unreadable)."""
    cpu = _container_values(g, desired, "memory")
    shares = _int(layout.CPU_SHARES, g.text(layout.CPU_SHARES, False))
    mem = _memory_limit_of({n: g.text(n, False) for n in g.files})
    return replace(
        cpu,
        cpu_shares=int(shares) if shares is not None and shares != INF else desired.cpu_shares,
        memory_limit=UNLIMITED if mem == INF else int(mem),
    )


def _container_steps(
    groups: Iterable[_Group],
    resource: Resource,
    desired: Mapping[tuple[str, str], ContainerValues],
    every: Mapping[tuple[str, str, str], _Group] | None = None,
) -> list[ContainerStep]:
    """`every`: all the plan's groups, where each container's pod group is found."""
    out: list[ContainerStep] = []
    for g in groups:
        if g.pod is None or g.container is None or g.container_id is None or g.pod_uid is None:
            continue
        values = desired.get((g.pod, g.container))
        if values is None:
            continue
        out.append(
            ContainerStep(
                g.pod,
                g.pod_uid,
                g.container,
                g.container_id,
                resource,
                tuple(g.changed(resource)),
                _container_values(
                    g, values, resource, every.get((Owner.POD.value, str(g.cgroup), "")) if every else None
                ),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# The invariant: replay the plan and check every parent/child pair after every step
