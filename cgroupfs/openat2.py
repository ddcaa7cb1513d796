"""openat2(2) confined beneath a directory, the system call Python's os module lacks (3.11): one call opens
a file below a directory descriptor, and the kernel refuses a symlink anywhere on the way
(RESOLVE_NO_SYMLINKS, which also covers /proc's magic links) and any path that would leave that directory
(RESOLVE_BENEATH). A wrapper only, like os.open: `cgroupfs.files` is its one caller, on paths it has
confined, and decides where openat2 is used.

Why: the component-by-component walk opens and closes every directory it passes; a node's diff reads some
13,000 files in 7,000 cgroup directories, and those directory opens and closes were a third of the system
calls of the read. openat2 gives the same guarantee for a whole relative path in one call (a confined path
holds no ".."; the kernel would refuse one that escaped). ctypes calls it through libc's syscall(2).
Linux >= 5.6 has it; where the kernel or a seccomp filter does not, or on an architecture whose number is
not the common one, `opener` answers None and the caller walks the components as before.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Final

OPENAT2: Final = 437  # in the kernel's common table: the same on every architecture listed below
_MACHINES: Final = frozenset({"x86_64", "aarch64", "arm64", "ppc64le", "ppc64", "s390x", "riscv64", "loongarch64"})
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
CONFINED: Final = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
AT_FDCWD: Final = -100

Opener = Callable[[int, str], int]
"""(directory fd, path relative to it) -> a new fd; raises OSError as os.open does."""

_openers: dict[int, Opener | None] = {}


def opener(flags: int) -> Opener | None:
    """A function that opens paths beneath a directory fd with open(2) `flags` and the CONFINED resolve
    flags, or None where openat2 is not available. Made once per `flags` (and tried once on ".")."""
    if flags not in _openers:
        _openers[flags] = _make(flags)
    return _openers[flags]


def _make(flags: int) -> Opener | None:
    if sys.platform != "linux" or os.uname().machine not in _MACHINES:
        return None
    import ctypes

    class OpenHow(ctypes.Structure):
        _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))

    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    # No argtypes (ctypes then converts each argument itself, which costs less per call than checking it
    # against declared types): the number and the size as C longs, the fd an int, the path a char *.
    call.restype = ctypes.c_long
    number = ctypes.c_long(OPENAT2)
    how = OpenHow(flags, 0, CONFINED)
    how_p, size = ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how))
    get_errno = ctypes.get_errno
    encoding, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

    def open_beneath(dir_fd: int, path: str) -> int:
        fd: int = call(number, dir_fd, path.encode(encoding, errors), how_p, size)
        if fd < 0:
            code = get_errno()
            raise OSError(code, os.strerror(code), path)
        return fd

    try:  # the kernel has it, no seccomp filter refuses it, and it knows these flags
        os.close(open_beneath(AT_FDCWD, "."))
    except OSError:
        return None
    return open_beneath
