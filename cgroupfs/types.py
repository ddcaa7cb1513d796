"""Driver-level vocabulary shared by the agent and the drivers (pure data)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from cgroupfs.errors import DriverError

UNLIMITED: Final = -1
"""CFS quota and memory limits: no limit (the kernel shows `-1` on v1, `max` on v2)."""


class NameError_(DriverError, ValueError):
    """An invalid cgroup or unit name."""


class CgroupVersion(enum.StrEnum):
    V1 = "1"
    V2 = "2"


class DriverKind(enum.StrEnum):
    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


class Controller(enum.StrEnum):
    CPU = "cpu"
    MEMORY = "memory"
    HUGETLB = "hugetlb"


@dataclass(frozen=True, slots=True)
class CgroupName:
    """A driver-agnostic cgroup name: ("kubepods", "burstable", "pod<uid>").

    Components may not hold "/" or "_" (the kubelet's rule) so that the systemd escaping "-" -> "_"
    can be reversed. The empty tuple is the root.
    """

    parts: tuple[str, ...]

    def __post_init__(self) -> None:
        for part in self.parts:
            if (
                not isinstance(part, str)
                or not part
                or "/" in part
                or "_" in part
                or part in (".", "..")
                or "\0" in part
                or "\n" in part
            ):
                raise NameError_(f"invalid cgroup name component {part!r} in {self.parts!r}")

    def child(self, part: str) -> CgroupName:
        return CgroupName((*self.parts, part))

    @property
    def parent(self) -> CgroupName:
        return CgroupName(self.parts[:-1])

    def is_ancestor_of(self, other: CgroupName) -> bool:
        return len(self.parts) < len(other.parts) and other.parts[: len(self.parts)] == self.parts

    def __str__(self) -> str:
        return "/" + "/".join(self.parts)


@dataclass(frozen=True, slots=True)
class CgroupValues:
    """The kubelet's ResourceConfig: what one pod or QoS cgroup should hold. None = no opinion.

    `hugetlb` maps a page size in bytes to a limit in bytes. `memory_reservation` is the v1 soft limit
    and the v2 `memory.low`.
    """

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # µs, UNLIMITED for none
    cpu_period: int | None = None  # µs
    memory_limit: int | None = None  # bytes, UNLIMITED for none
    memory_reservation: int | None = None  # bytes
    hugetlb: Mapping[int, int] = field(default_factory=dict)
