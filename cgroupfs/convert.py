"""Pure v1 <-> v2 conversions and kernel value forms, each pinned by upstream boundary tables."""

from __future__ import annotations

import math
from typing import Final

MIN_SHARES: Final = 2
MAX_SHARES: Final = 262144
MIN_WEIGHT: Final = 1
MAX_WEIGHT: Final = 10000
DEFAULT_PERIOD_US: Final = 100_000
PAGE_SIZE: Final = 4096
V1_UNLIMITED_READBACK: Final = 9223372036854771712  # PAGE_COUNTER_MAX * 4096, what v1 shows for -1


def shares_to_weight_linear(shares: int) -> int:
    """The kubelet's getCPUWeight for pod and QoS cgroups (and runc <= 1.3.1): 2 -> 1, 1024 -> 39."""
    if shares >= MAX_SHARES:
        return MAX_WEIGHT
    if shares <= MIN_SHARES:
        return MIN_WEIGHT
    return 1 + ((shares - 2) * 9999) // 262142


def weight_to_shares_linear(weight: int) -> int:
    """The kubelet's cpuWeightToCPUShares (status read-back)."""
    return ((weight - 1) * 262142) // 9999 + 2


def shares_to_weight_quadratic(shares: int) -> int:
    """runc >= 1.3.2 ConvertCPUSharesToCgroupV2Value: 2 -> 1, 1024 -> 100, 262144 -> 10000; 0 = unset."""
    if shares == 0:
        return 0
    if shares <= MIN_SHARES:
        return MIN_WEIGHT
    if shares >= MAX_SHARES:
        return MAX_WEIGHT
    log = math.log2(shares)
    exponent = (log * log + 125 * log) / 612.0 - 7.0 / 34.0
    return math.ceil(10**exponent)


def page_round(value: int, page: int = PAGE_SIZE) -> int:
    """The kernel keeps memory limits in whole pages: 100000000 reads back as 99999744."""
    return value // page * page


def hugepage_size_name(size_bytes: int) -> str:
    """HugePageUnitSizeFromByteSize: 2097152 -> "2MB", 1073741824 -> "1GB"."""
    if size_bytes <= 0:
        raise ValueError(f"invalid huge page size {size_bytes}")
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    i = 0
    size = size_bytes
    while size % 1024 == 0 and i < len(units) - 1:
        size //= 1024
        i += 1
    return f"{size}{units[i]}"


def hugepage_size_from_name(name: str) -> int:
    """Inverse of `hugepage_size_name`: "2MB" -> 2097152."""
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "PB": 1 << 50}
    for suffix, mult in units.items():
        if name.endswith(suffix) and name[: -len(suffix)].isascii() and name[: -len(suffix)].isdigit():
            return int(name[: -len(suffix)]) * mult
    if name.endswith("B") and name[:-1].isascii() and name[:-1].isdigit():
        return int(name[:-1])
    raise ValueError(f"invalid huge page size name {name!r}")


def hugepage_size_from_kb_dir(dirname: str) -> int:
    """/sys/kernel/mm/hugepages/hugepages-2048kB -> 2097152."""
    prefix, suffix = "hugepages-", "kB"
    if not dirname.startswith(prefix) or not dirname.endswith(suffix):
        raise ValueError(f"not a huge page directory: {dirname!r}")
    return int(dirname[len(prefix) : -len(suffix)]) * 1024


def render_cpu_max(quota: int | None, period: int | None) -> str:
    """v2 cpu.max: "<quota|max> <period>"; quota <= 0 is "max", period 0/None is 100000."""
    q = "max" if quota is None or quota <= 0 else str(quota)
    return f"{q} {period or DEFAULT_PERIOD_US}"


def parse_cpu_max(text: str) -> tuple[int, int]:
    """v2 cpu.max -> (quota, period); "max" is -1."""
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"invalid cpu.max {text!r}")
    quota = -1 if parts[0] == "max" else int(parts[0])
    return quota, int(parts[1])
