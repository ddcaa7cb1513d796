"""What the kernel's errno means for the caller: the typed `cgroupfs.errors` of a failed cgroup operation.

A bare OSError says what the kernel refused, not what to do next. The same errno means different things
on different files (EINVAL on `cpu.cfs_quota_us` is a hierarchy ratio, on `memory.limit_in_bytes` the
memory <= memory+swap order), so the write refusals look at the file's name and, for the message, at a
sibling file the caller reads for them. Pure: `cgroupfs.files` makes the system calls and hands the
errors here.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Final

from cgroupfs.errors import (
    CgroupError,
    CgroupNotFound,
    CgroupPathRefused,
    CgroupPermissionError,
    CgroupWriteError,
    MemoryBelowUsage,
    MemswOrderRefused,
    QuotaRefused,
)
from cgroupfs.layout import (
    CPU_MAX,
    CPU_PERIOD,
    CPU_QUOTA,
    MEMORY_CURRENT,
    MEMORY_LIMIT,
    MEMORY_MAX,
    MEMORY_MEMSW,
    MEMORY_USAGE_V1,
)

MEMORY_MEMSW_USAGE: Final = "memory.memsw.usage_in_bytes"

_QUOTA_FILES: Final = frozenset({CPU_QUOTA, CPU_PERIOD, CPU_MAX})
_USAGE_OF: Final = {
    MEMORY_LIMIT: MEMORY_USAGE_V1,
    MEMORY_MEMSW: MEMORY_MEMSW_USAGE,
    MEMORY_MAX: MEMORY_CURRENT,
}
_PERMISSION: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def errno_name(code: int | None) -> str:
    return errno.errorcode.get(code or 0, f"errno {code}")


def classify(op: str, relpath: str, err: OSError, value: str | None = None) -> CgroupError:
    """The classification shared by every operation; `write_refusal` refines it for writes."""
    code = err.errno
    detail = f"{errno_name(code)}: {err.strerror or err}"
    if code == errno.ENOENT:
        return CgroupNotFound(op, relpath, f"does not exist ({detail})", value, code)
    if code in _PERMISSION:
        return CgroupPermissionError(
            op,
            relpath,
            f"not permitted ({detail}); the agent needs root and a read-write cgroup mount",
            value,
            code,
        )
    if code == errno.ELOOP:
        return CgroupPathRefused(
            op, relpath, f"is a symlink, which is never followed ({detail})", value, code
        )
    if op == "read":
        return CgroupError(op, relpath, detail, value, code)
    return CgroupWriteError(op, relpath, detail, value, code)


def rmdir_refusal(reldir: str, err: OSError) -> CgroupError:
    """Why a cgroup could not be removed: still in use, not a cgroup, or what `classify` says."""
    if err.errno in (errno.EBUSY, errno.ENOTEMPTY):
        return CgroupWriteError(
            "rmdir",
            reldir,
            f"the cgroup still has processes or child cgroups ({errno_name(err.errno)})",
            errno_=err.errno,
        )
    if err.errno == errno.ENOTDIR:
        return CgroupPathRefused("rmdir", reldir, "not a cgroup directory", errno_=err.errno)
    return classify("rmdir", reldir, err)


def write_refusal(
    relpath: str, name: str, value: str, err: OSError, sibling: Callable[[str], int | None]
) -> CgroupError:
    """Why the kernel refused to write `value` to the file `name` at `relpath`. `sibling(file)` is a
    number from another file of the same cgroup (None if unreadable), to name usage or the other limit."""
    code = err.errno
    if code == errno.ENOENT:
        return CgroupNotFound(
            "write",
            relpath,
            "no such file in this cgroup (the kernel does not offer it here)",
            value,
            code,
        )
    if code == errno.EBUSY and name in _USAGE_OF:
        usage = sibling(_USAGE_OF[name])
        shown = f"{usage} bytes ({usage / (1 << 20):.1f} MiB)" if usage is not None else "unknown"
        return MemoryBelowUsage(
            "write",
            relpath,
            f"EBUSY: the new limit is below the cgroup's current usage of {shown}, "
            "which the kernel could not reclaim",
            value,
            usage,
        )
    if code == errno.EINVAL and name in _QUOTA_FILES:
        return QuotaRefused(
            "write",
            relpath,
            "EINVAL: a child cgroup's quota/period may be above the new value, or quota and period "
            "were written in the wrong order (grow parents first, shrink children first), "
            "or the value is out of range",
            value,
            code,
        )
    if code == errno.EINVAL and name in (MEMORY_LIMIT, MEMORY_MEMSW):
        other = MEMORY_MEMSW if name == MEMORY_LIMIT else MEMORY_LIMIT
        bound = sibling(other)
        if bound is not None:
            rule = (
                "memory must stay <= memory+swap; raise memory.memsw.limit_in_bytes first"
                if name == MEMORY_LIMIT
                else "memory+swap must stay >= memory; lower memory.limit_in_bytes first"
            )
            return MemswOrderRefused(
                "write", relpath, f"EINVAL: {rule} (now {other} = {bound})", value, code
            )
    return classify("write", relpath, err, value)
