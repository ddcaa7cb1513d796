"""QoS tier values: the kubelet's QoS container manager and node-allocatable enforcement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from agent.compute.config import ComputeConfig
from agent.compute.cpu import MIN_SHARES, milli_cpu_to_shares
from agent.compute.pod import PodComputation
from agent.model import CgroupName, CgroupValues, QOSClass, TierKind

HUGEPAGES_UNBOUNDED: Final = 1 << 62  # setHugePagesUnbounded


@dataclass(frozen=True, slots=True)
class TierComputation:
    kind: TierKind
    cgroup: CgroupName
    values: CgroupValues
    derivation: tuple[str, ...]


def tier_names(root: CgroupName) -> dict[TierKind, CgroupName]:
    node = root.child("kubepods")
    return {
        TierKind.NODE: node,
        TierKind.BURSTABLE: node.child("burstable"),
        TierKind.BEST_EFFORT: node.child("besteffort"),
    }


def compute_tiers(pods: Sequence[PodComputation], cfg: ComputeConfig) -> tuple[TierComputation, ...]:
    names = tier_names(cfg.cgroup_root)
    burstable = [p for p in pods if p.qos.qos is QOSClass.BURSTABLE]
    burstable_cpu = sum(p.requests.cpu_milli or 0 for p in burstable)
    mem_by_qos = {q: sum(p.requests.memory or 0 for p in pods if p.qos.qos is q) for q in QOSClass}
    unbounded = {size: HUGEPAGES_UNBOUNDED for size in cfg.hugepage_sizes}

    burstable_limit = besteffort_limit = None
    mem_notes: tuple[str, ...] = ()
    alloc_mem = cfg.allocatable.memory if cfg.allocatable else None
    percent = cfg.qos_reserved_memory_percent
    if percent is not None and alloc_mem:
        g, b = mem_by_qos[QOSClass.GUARANTEED], mem_by_qos[QOSClass.BURSTABLE]
        burstable_limit = alloc_mem - g * percent // 100
        besteffort_limit = burstable_limit - b * percent // 100
        mem_notes = (
            f"qos-reserved memory={percent}%: burstable memory limit = allocatable {alloc_mem} - "
            f"{percent}% of Guaranteed requests {g} = {burstable_limit}",
            f"besteffort memory limit = {burstable_limit} - {percent}% of Burstable requests {b} = {besteffort_limit}",
        )

    node: list[str] = []
    node_values = CgroupValues()
    if cfg.allocatable is not None:
        a = cfg.allocatable
        node_values = CgroupValues(
            cpu_shares=milli_cpu_to_shares(a.cpu_milli) if a.cpu_milli is not None else None,
            memory_limit=a.memory,
            hugetlb={s: a.hugepages[s] for s in cfg.hugepage_sizes if s in a.hugepages},
        )
        node.append(f"sized from allocatable: cpu {a.cpu_milli}m, memory {a.memory} bytes")
    else:
        node.append("no allocatable given: the kubepods root is left as it is")

    return (
        TierComputation(TierKind.NODE, names[TierKind.NODE], node_values, tuple(node)),
        TierComputation(
            TierKind.BURSTABLE,
            names[TierKind.BURSTABLE],
            CgroupValues(
                cpu_shares=milli_cpu_to_shares(burstable_cpu), memory_limit=burstable_limit, hugetlb=unbounded
            ),
            (
                f"cpu.shares = MilliCPUToShares(sum of {len(burstable)} Burstable pod CPU requests "
                f"= {burstable_cpu}m) = {milli_cpu_to_shares(burstable_cpu)}",
                *mem_notes[:1],
            ),
        ),
        TierComputation(
            TierKind.BEST_EFFORT,
            names[TierKind.BEST_EFFORT],
            CgroupValues(cpu_shares=MIN_SHARES, memory_limit=besteffort_limit, hugetlb=unbounded),
            ("cpu.shares = 2 always", *mem_notes[1:]),
        ),
    )
