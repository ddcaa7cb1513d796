"""The cgroup drivers' errors, dependency-free so that the application can recognise them without cgroupfs
knowing the application. `retryable` says whether trying again later can succeed.

The cgroup file errors are typed by what the caller should do (aesthetics principles 8-9): CgroupNotFound
is the benign "not there yet / already gone"; QuotaRefused, MemoryBelowUsage and MemswOrderRefused are
kernel refusals that another order or a later retry may fix; CgroupPermissionError and CgroupPathRefused
are permanent. Each names the path, the value and the reason on one line (`cgroupfs.refusals` chooses the
type from the kernel's errno).
"""

from __future__ import annotations

import errno


class DriverError(Exception):
    """Root of cgroupfs' errors (cgroup files, mounts, systemd)."""

    retryable: bool = False

    def user_message(self) -> str:
        return str(self)


class CgroupError(DriverError):
    """A cgroup file operation failed. `path` is relative to --cgroupfs; `value` is what was written
    (None for other operations); `errno` is the kernel's answer when there was one."""

    def __init__(
        self, op: str, path: str, reason: str, value: str | None = None, errno_: int | None = None
    ) -> None:
        self.op = op
        self.path = path
        self.reason = reason
        self.value = value
        self.errno = errno_
        super().__init__(op, path, reason, value, errno_)

    def __str__(self) -> str:
        shown = self.path if self.path.isprintable() and self.path else repr(self.path)
        what = f"{self.op} {shown}" if self.value is None else f"{self.op} {self.value!r} to {shown}"
        return f"{what}: {self.reason}"


class CgroupPathRefused(CgroupError):
    """The path is malformed, outside the owned roots, or runs through a symlink: a bug or an attack."""


class CgroupNotFound(CgroupError):
    """The cgroup or file does not exist (yet, or any more): benign, retry on the next pass."""

    retryable = True


class CgroupPermissionError(CgroupError):
    """EACCES, EPERM or EROFS: the agent lacks the rights, or the cgroup filesystem is read-only."""


class CgroupWriteError(CgroupError):
    """The kernel refused a write or a directory operation for another reason."""


class QuotaRefused(CgroupWriteError):
    """EINVAL on a CFS quota or period: the hierarchy's quota/period ratios would be violated."""

    retryable = True


class MemoryBelowUsage(CgroupWriteError):
    """EBUSY on a memory limit: the new limit is below usage the kernel could not reclaim."""

    retryable = True

    def __init__(self, op: str, path: str, reason: str, value: str | None, usage: int | None) -> None:
        super().__init__(op, path, reason, value, errno.EBUSY)
        self.usage = usage


class MemswOrderRefused(CgroupWriteError):
    """EINVAL on a v1 memory or memory+swap limit: memory must stay <= memory+swap."""

    retryable = True
