"""Faults at the system-call boundary of this process: `os.open`, `os.write`, `os.fsync` and `os.replace`
(the calls `cgroupfs.files.CgroupFiles` and `agent.infra.atomicfile` make) fail for the files a fault names,
with the errno the kernel would return, so the agent's own error mapping, retries and reports are what
is exercised, not a stand-in for them.

A fault matches on the file's real path (for a descriptor, /proc/self/fd/N), and only in the thread that
armed the injector: the fake CRI server's threads, which play runc writing container files, are left
alone (their faults are CRI errors). A short write writes nothing of a cgroup value (kernfs applies a
value whole or not at all; the short count is the anomaly to detect) and half of a regular file.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal
from unittest import mock

Call = Literal["open", "write", "fsync", "replace"]
SHORT = -1  # `errno` of a short write


@dataclass
class Fault:
    call: Call
    code: int  # an errno, or SHORT (write only)
    match: Callable[[str], bool]  # on the file's real path
    times: int = 1  # how many matching calls fail; -1: every one until cleared
    label: str = ""

    @property
    def name(self) -> str:
        what = "short write" if self.code == SHORT else errno.errorcode.get(self.code, str(self.code))
        return self.label or f"{self.call} {what}"


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class SyscallFaults:
    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.injected = 0
        self.by_name: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._real = {"open": os.open, "write": os.write, "fsync": os.fsync, "replace": os.replace}

    def add(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def _take(self, call: Call, path: str) -> Fault | None:
        if threading.current_thread() is not self._thread:
            return None
        for f in self.faults:
            if f.call == call and f.times != 0 and f.match(path):
                if f.times > 0:
                    f.times -= 1
                self.injected += 1
                self.by_name[f.name] = self.by_name.get(f.name, 0) + 1
                return f
        return None

    def _raise(self, fault: Fault, path: str) -> None:
        raise OSError(fault.code, os.strerror(fault.code), path)

    # ---- the patched calls ----

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        full = os.fsdecode(path)
        if dir_fd is not None and not full.startswith("/"):
            full = f"{_fd_path(dir_fd)}/{full}"
        fault = self._take("open", full) if self.faults else None
        if fault is not None:
            self._raise(fault, full)
        return self._real["open"](path, flags, mode, dir_fd=dir_fd)  # type: ignore[operator,no-any-return]

    def _write(self, fd: int, data: Any) -> int:
        fault = self._take("write", _fd_path(fd)) if self.faults else None
        if fault is not None:
            if fault.code != SHORT:
                self._raise(fault, _fd_path(fd))
            size = len(data)
            if _fd_path(fd).startswith("/sys/fs/cgroup/"):
                return max(0, size - 1)  # nothing applied, a short count returned
            return self._real["write"](fd, bytes(data)[: max(1, size // 2)])  # type: ignore[operator,no-any-return]
        return self._real["write"](fd, data)  # type: ignore[operator,no-any-return]

    def _fsync(self, fd: int) -> None:
        fault = self._take("fsync", _fd_path(fd)) if self.faults else None
        if fault is not None:
            self._raise(fault, _fd_path(fd))
        self._real["fsync"](fd)

    def _replace(self, src: Any, dst: Any, **kwargs: Any) -> None:
        full = os.path.abspath(os.fsdecode(dst))
        fault = self._take("replace", full) if self.faults else None
        if fault is not None:
            self._raise(fault, full)
        self._real["replace"](src, dst, **kwargs)

    @contextmanager
    def armed(self) -> Iterator[SyscallFaults]:
        """Patch the calls for the duration; faults apply to the calling thread only."""
        self._thread = threading.current_thread()
        with (
            mock.patch("os.open", self._open),
            mock.patch("os.write", self._write),
            mock.patch("os.fsync", self._fsync),
            mock.patch("os.replace", self._replace),
        ):
            try:
                yield self
            finally:
                self._thread = None
