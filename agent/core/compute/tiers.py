"""QoS tier values: the kubelet's QoS container manager and node-allocatable enforcement."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from agent.core.compute.config import ComputeConfig
from agent.core.compute.cpu import MIN_SHARES, milli_cpu_to_shares
from agent.core.compute.pod import PodComputation
from agent.core.model import CgroupName, CgroupValues, QOSClass, TierKind

HUGEPAGES_UNBOUNDED: Final = 1 << 62  # setHugePagesUnbounded


@dataclass(frozen=True, slots=True)
class TierComputation:
    """One QoS tier cgroup's values, and how they were derived."""

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


@dataclass(frozen=True, slots=True)
class TierSums:
    """All the tiers read of the pods. Why a value of its own: a daemon keeps these as running totals
    (subtract a pod's old contribution, add its new one) instead of recomputing every pod per event."""

    burstable_pods: int = 0
    burstable_cpu_milli: int = 0
    guaranteed_memory: int = 0
    burstable_memory: int = 0

    def __add__(self, other: TierSums) -> TierSums:
        return TierSums(
            self.burstable_pods + other.burstable_pods,
            self.burstable_cpu_milli + other.burstable_cpu_milli,
            self.guaranteed_memory + other.guaranteed_memory,
            self.burstable_memory + other.burstable_memory,
        )

    def __sub__(self, other: TierSums) -> TierSums:
        return TierSums(
            self.burstable_pods - other.burstable_pods,
            self.burstable_cpu_milli - other.burstable_cpu_milli,
            self.guaranteed_memory - other.guaranteed_memory,
            self.burstable_memory - other.burstable_memory,
        )

    def most(self, other: TierSums) -> TierSums:
        """Field by field the larger: the share that protects both an old and a new request while a
        pod's change is on its way (the tiers shrink for a growth at once, grow after a shrink is done)."""
        return TierSums(
            max(self.burstable_pods, other.burstable_pods),
            max(self.burstable_cpu_milli, other.burstable_cpu_milli),
            max(self.guaranteed_memory, other.guaranteed_memory),
            max(self.burstable_memory, other.burstable_memory),
        )


NO_SUMS: Final = TierSums()


def tier_contribution(pod: PodComputation) -> TierSums:
    """One pod's share of the sums (BestEffort pods contribute nothing)."""
    qos = pod.qos.qos
    if qos is QOSClass.BURSTABLE:
        return TierSums(1, pod.requests.cpu_milli or 0, 0, pod.requests.memory or 0)
    if qos is QOSClass.GUARANTEED:
        return TierSums(0, 0, pod.requests.memory or 0, 0)
    return NO_SUMS


def tier_sums(pods: Iterable[PodComputation]) -> TierSums:
    total = NO_SUMS
    for p in pods:
        total = total + tier_contribution(p)
    return total


class RunningTierSums:
    """Each pod's contribution (with a token saying what it was computed from) and their running total.

    Why: a pod event changes one contribution, so the tiers cost O(1) per event instead of O(node).
    Not thread-safe: the owner holds its lock around every call."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[object, TierSums]] = {}
        self.total: TierSums = NO_SUMS

    def __len__(self) -> int:
        return len(self._parts)

    def token(self, uid: str) -> object | None:
        part = self._parts.get(uid)
        return part[0] if part is not None else None

    def part(self, uid: str) -> TierSums | None:
        found = self._parts.get(uid)
        return found[1] if found is not None else None

    def put(self, uid: str, token: object, part: TierSums) -> None:
        old = self._parts.get(uid)
        if old is not None:
            self.total = self.total - old[1]
        self._parts[uid] = (token, part)
        self.total = self.total + part

    def drop(self, uid: str) -> None:
        old = self._parts.pop(uid, None)
        if old is not None:
            self.total = self.total - old[1]

    def keep_only(self, uids: Iterable[str]) -> None:
        """Drop every pod not in `uids` (pods that left without a removal being seen)."""
        keep = set(uids)
        for uid in [u for u in self._parts if u not in keep]:
            self.drop(uid)


def compute_tiers(pods: Sequence[PodComputation], cfg: ComputeConfig) -> tuple[TierComputation, ...]:
    return compute_tiers_from_sums(tier_sums(pods), cfg)


def compute_tiers_from_sums(sums: TierSums, cfg: ComputeConfig) -> tuple[TierComputation, ...]:
    """The one formula for the tiers: from the sums alone, whoever keeps them."""
    names = tier_names(cfg.cgroup_root)
    burstable_cpu = sums.burstable_cpu_milli
    unbounded = {size: HUGEPAGES_UNBOUNDED for size in cfg.hugepage_sizes}

    burstable_limit = besteffort_limit = None
    mem_notes: tuple[str, ...] = ()
    alloc_mem = cfg.allocatable.memory if cfg.allocatable else None
    percent = cfg.qos_reserved_memory_percent
    if percent is not None and alloc_mem:
        g, b = sums.guaranteed_memory, sums.burstable_memory
        burstable_limit = alloc_mem - g * percent // 100
        besteffort_limit = burstable_limit - b * percent // 100
        mem_notes = (
            f"qos-reserved memory={percent}%: burstable memory limit = allocatable {alloc_mem} - "
            f"{percent}% of Guaranteed requests {g} = {burstable_limit}",
            f"besteffort memory limit = {burstable_limit} - {percent}% of Burstable requests {b} = {besteffort_limit}",
        )

    node: list[str] = []
    node_values = CgroupValues()
    if cfg.allocatable is not None or cfg.kubepods_size is not None:
        a = cfg.kubepods_size or cfg.allocatable
        assert a is not None
        # hugetlb: the kubelet's node-allocatable enforcement writes the allocatable huge pages once at start,
        # but kubepods is also the Guaranteed tier, which its QoS pass (at start, on admission, every 60 s)
        # sets unbounded like the other two (setHugePagesUnbounded): that is the value the node keeps.
        node_values = CgroupValues(
            cpu_shares=milli_cpu_to_shares(a.cpu_milli) if a.cpu_milli is not None else None,
            memory_limit=a.memory,
            hugetlb=unbounded,
        )
        what = "capacity (enforceNodeAllocatable has no pods)" if cfg.kubepods_size else "allocatable"
        node.append(f"sized from {what}: cpu {a.cpu_milli}m, memory {a.memory} bytes; hugetlb unbounded "
                    "(the kubelet's QoS pass treats kubepods as the Guaranteed tier)")
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
                f"cpu.shares = MilliCPUToShares(sum of {sums.burstable_pods} Burstable pod CPU requests "
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
