"""Reading limits back from cgroup file texts (v1 and v2 forms), the same way for ordering and for checking."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from agent.core.plan.types import INF
from cgroupfs import layout
from cgroupfs.convert import parse_cpu_max
from cgroupfs.layout import FileSetting
from cgroupfs.types import CgroupVersion


@lru_cache(maxsize=8192)  # a plan's replay reads the same few texts hundreds of times (pure: name + text)
def _int(filename: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        canon = layout.canonical(filename, text)
    except ValueError:
        return None
    return INF if canon == "max" else float(canon)


def _cpu_limit_of(texts: Mapping[str, str | None]) -> float:
    if layout.CPU_MAX in texts:
        text = texts[layout.CPU_MAX]
        if text is None:
            return INF
        try:
            quota, period = parse_cpu_max(text)
        except ValueError:
            return INF
        return INF if quota < 0 else quota / period
    q = _int(layout.CPU_QUOTA, texts.get(layout.CPU_QUOTA))
    p = _int(layout.CPU_PERIOD, texts.get(layout.CPU_PERIOD))
    if q is None or q == INF or q < 0:
        return INF
    return q / (p or 100000.0)


def _memory_limit_of(texts: Mapping[str, str | None]) -> float:
    for name in (layout.MEMORY_LIMIT, layout.MEMORY_MAX):
        if name in texts:
            mem = _int(name, texts[name])
            return INF if mem is None else mem
    return INF


def _memory_usage(s: FileSetting, extra: Mapping[str, str | None]) -> float | None:
    """The memory usage of the cgroup a memory file `s` is in, as the plan read it (`extra`)."""
    name = layout.MEMORY_USAGE_V1 if s.version is CgroupVersion.V1 else layout.MEMORY_CURRENT
    return _int(name, extra.get(f"{s.directory}/{name}"))
