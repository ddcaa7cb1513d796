"""A container's values as its cgroup files show them: how the allocated state is rebuilt from the kernel
when no record of it survives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from agent.config.settings import Settings
from agent.core.compute import compute_node
from agent.core.diff import Owner, desired_files
from agent.core.model import UNLIMITED, ContainerValues, PodView
from agent.pipeline import Environment
from agent.resize.allocation import rebuild_allocation
from agent.resize.state import PodRecord
from cgroupfs import layout
from cgroupfs.convert import parse_cpu_max


def container_values_from(
    texts: dict[str, str | None], want: ContainerValues, accept: Mapping[str, tuple[str, ...]] | None = None
) -> ContainerValues | None:
    """A container's values as its cgroup files show them (None when none could be read); a file that
    shows the wanted value maps back to it exactly (cpu.weight is not invertible otherwise). `accept` names,
    per file, the other values that mean the wanted one: under the systemd driver a CPU limit file holds the
    exact quota or systemd's rounded one (cgroupfs.systemd.grain), neither of which is a resize."""
    if all(v is None for v in texts.values()):
        return None
    out = want

    def accepted(name: str) -> bool:
        current = texts.get(name)
        forms = accept.get(name, ()) if accept else ()
        try:
            return current is not None and any(
                layout.canonical(name, current) == layout.canonical(name, v) for v in forms)
        except ValueError:
            return False

    def same(name: str, value: str) -> bool:
        current = texts.get(name)
        try:
            return current is not None and layout.canonical(name, current) == layout.canonical(name, value)
        except ValueError:
            return False

    try:
        if (t := texts.get(layout.CPU_SHARES)) is not None:
            out = replace(out, cpu_shares=int(t))
        if (t := texts.get(layout.CPU_QUOTA)) is not None and not accepted(layout.CPU_QUOTA):
            out = replace(out, cpu_quota=int(t))
        if (t := texts.get(layout.CPU_PERIOD)) is not None and not accepted(layout.CPU_PERIOD):
            out = replace(out, cpu_period=int(t))
        if (t := texts.get(layout.CPU_MAX)) is not None and not accepted(layout.CPU_MAX):
            q, p = parse_cpu_max(t)
            out = replace(out, cpu_quota=q if q > 0 else UNLIMITED, cpu_period=p)
        for name in (layout.MEMORY_LIMIT, layout.MEMORY_MAX):
            if (t := texts.get(name)) is not None:
                canon = layout.canonical(name, t)
                out = replace(out, memory_limit=UNLIMITED if canon == "max" else int(canon))
        if (t := texts.get(layout.CPU_WEIGHT)) is not None and not same(layout.CPU_WEIGHT, t):
            out = replace(out, cpu_shares=2 + (int(t) - 1) * 262142 // 9999)
    except ValueError:
        return None
    return out


def rebuild_records(settings: Settings, env: Environment, pods: Sequence[PodView]) -> list[PodRecord]:
    """Allocated state from what the kernel shows (spec values where they match exactly): for a first
    start, or a pod whose record was lost. Reads the containers' files; writes nothing."""
    cfg = settings.compute_config(env.hugepage_sizes)
    comp = compute_node(pods, cfg)
    wanted = desired_files(comp, env.hierarchy, env.render_options, env.container_render_options, True)
    mine = [d for d in wanted if d.owner is Owner.CONTAINER and d.pod is not None and d.container]
    read, _ = env.files.read_many(d.setting.path for d in mine)
    texts: dict[tuple[str, str], dict[str, str | None]] = {}
    accept: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
    for d in mine:
        texts.setdefault((d.pod or "", d.container or ""), {})[d.setting.filename] = read[d.setting.path]
        if d.setting.filename != layout.CPU_WEIGHT:  # the weight's two formulas are not the same shares
            accept.setdefault((d.pod or "", d.container or ""), {})[d.setting.filename] = (d.setting.value, *d.accept)
    out = []
    for pc in comp.pods:
        observed: dict[str, ContainerValues] = {}
        for cc in pc.containers:
            key = (pc.pod.key, cc.container.name)
            values = container_values_from(texts.get(key, {}), cc.values, accept.get(key))
            if values is not None:
                observed[cc.container.name] = values
        alloc = rebuild_allocation(pc.pod, observed, cfg)
        out.append(PodRecord(pc.pod.uid, pc.pod.key, alloc, alloc))
    return out
