"""The invariant on a snapshot of limit files (absolute path -> text), whatever wrote them: below the
campaign's root, no cgroup's memory limit or CPU quota ratio is above its parent's, and the children
of a pod cgroup sum within it (a child without a limit is bounded by its parent and takes no fixed
share). Pods with pod-level resources are not told apart here; the API campaign's pods have none."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.resize.invariant import memory_limit, quota_ratio

INF = float("inf")


def _memory(text: str | None) -> float:
    return INF if text is None else memory_limit(text)


def _ratio(quota: str | None, period: str | None) -> float:
    return INF if quota is None or period is None else quota_ratio(quota, period)


def breaches(files: Mapping[str, str], tops: Iterable[str]) -> list[str]:
    """Every breach in one snapshot, as `path: what`."""
    out: list[str] = []
    dirs = {os.path.dirname(p) for p in files}
    for top in tops:
        below = sorted(d for d in dirs if d == top or d.startswith(top + "/"))
        children: dict[str, list[str]] = defaultdict(list)
        for d in below:
            if d != top:
                children[os.path.dirname(d)].append(d)
        for parent, kids in children.items():
            pm = _memory(files.get(f"{parent}/memory.limit_in_bytes"))
            pr = _ratio(files.get(f"{parent}/cpu.cfs_quota_us"), files.get(f"{parent}/cpu.cfs_period_us"))
            mems = [_memory(files.get(f"{k}/memory.limit_in_bytes")) for k in kids if f"{k}/memory.limit_in_bytes" in files]
            ratios = [_ratio(files.get(f"{k}/cpu.cfs_quota_us"), files.get(f"{k}/cpu.cfs_period_us")) for k in kids if f"{k}/cpu.cfs_quota_us" in files]
            rel = parent[len(top):] or "/"
            for m in mems:  # an unlimited child is bounded by its parent (hierarchical), as the kernel has it
                if m != INF and m > pm:
                    out.append(f"{rel}: a child's memory {m:.0f} above {pm:.0f}")
            for r in ratios:
                if r != INF and r > pr + 1e-9:
                    out.append(f"{rel}: a child's cpu {r:.3f} above {pr:.3f}")
            if os.path.basename(parent).startswith("pod"):
                mem_sum, cpu_sum = sum(m for m in mems if m != INF), sum(r for r in ratios if r != INF)
                if mem_sum > pm:
                    out.append(f"{rel}: children's memory sum {mem_sum:.0f} above {pm:.0f}")
                if cpu_sum > pr + 1e-9:
                    out.append(f"{rel}: children's cpu sum {cpu_sum:.3f} above {pr:.3f}")
    return out


def check_snapshots(path: Path, tops: Iterable[str]) -> tuple[int, int, list[str]]:
    """(snapshots, breached snapshots, the first breaches) of a KCG_INVARIANT_OUT file; a snapshot that
    never settled counts as taken, not as breached."""
    tops = tuple(tops)
    taken = breached = 0
    first: list[str] = []
    if not path.exists():
        return 0, 0, []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the daemon killed mid-line
        taken += 1
        if record.get("files") is None:
            continue
        found = breaches(record["files"], tops)
        if found:
            breached += 1
            if len(first) < 3:
                first.append(f"after {record['after'].rsplit('/', 3)[-3:]} = {record['value']}: {found[0]}")
    return taken, breached, first
