"""Counter files kept open between reads, for a sampler that reads the same few files of every container
each second.

Why: a path read walks every directory component with O_NOFOLLOW (six to eight opens per cgroup) and
confines the path again each time; at a thousand containers that walk was most of the sampler's cost.
A group of files (one container's counters, in one or several hierarchies) is opened once through
`CgroupFiles.open_files` (so it is confined and symlink-free exactly as a path read is) and then read
with pread at offset 0, which makes kernfs generate the file afresh.

Stale descriptors: a cgroup removed and created again under the same path is a new kernfs node, and
the old descriptor answers ENODEV (ENOENT or ESTALE elsewhere) for ever. Such a group is closed and
opened again at once, so the read sees the new cgroup, as a path read would, and never the old one.

Descriptors: each kept file costs one against RLIMIT_NOFILE. `raise_nofile_limit` lifts the soft
limit toward the hard one at start; the groups kept stay within the soft limit minus a reserve for the
rest of the process, and when the limit or EMFILE is reached the remaining groups are read by path as
before (with one warning) rather than failing. A group is closed as soon as `sweep` no longer lists it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from collections.abc import Callable, Collection, Sequence
from typing import Final

from cgroupfs.errors import CgroupError, CgroupNotFound
from cgroupfs.files import CgroupFiles

READ_SIZE: Final = 65536
WANTED_NOFILE: Final = 65536
RESERVE_MIN: Final = 256  # descriptors left for the rest of the process (sockets, logs, path reads)
ROOM_FOR_PATH_READS: Final = 32  # given back after EMFILE: a path read holds one fd per path component
_STALE: Final = frozenset({errno.ENODEV, errno.ENOENT, errno.ESTALE})
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE})

Group = tuple[str, ...]  # the files' paths relative to --cgroupfs, in the order they are read
Texts = Sequence[bytes | None]


def _read_error(group: Group, err: OSError) -> CgroupError:
    reason = f"{errno.errorcode.get(err.errno or 0, f'errno {err.errno}')}: {err.strerror}"
    return CgroupError("read", " ".join(group), reason, errno_=err.errno)


def raise_nofile_limit(wanted: int = WANTED_NOFILE) -> int:
    """Lift the soft RLIMIT_NOFILE toward the hard limit (never above `wanted`); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (ValueError, OSError):
            return soft
        return ceiling
    return wanted if soft == resource.RLIM_INFINITY else soft


def _budget() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = WANTED_NOFILE
    return max(soft - max(RESERVE_MIN, soft // 4), 0)


class PinnedFiles:
    """Groups of open counter files, read with pread. `warn` hears, once, that descriptors ran out."""

    def __init__(
        self,
        files: CgroupFiles,
        warn: Callable[[str], None] = lambda _message: None,
        budget: int | None = None,
        pread: Callable[[int, int, int], bytes] = os.pread,
    ) -> None:
        self.files = files
        self.budget = _budget() if budget is None else budget
        self._warn = warn
        self._warned = False
        self._pread = pread
        self._groups: dict[Group, list[int]] = {}
        self.open_count = 0

    def read(self, group: Group) -> Texts:
        """The files' contents (None for a file or cgroup that is not there)."""
        fds = self._groups.get(group)
        if fds is None:
            return self._read_new(group)
        try:
            return self._read_fds(fds)
        except OSError as err:
            self._close(group)
            if err.errno in _STALE:  # the cgroup went away (and may be back under the same path)
                return self._read_new(group)
            raise _read_error(group, err) from err

    def _read_fds(self, fds: list[int]) -> list[bytes]:
        pread = self._pread
        out = [pread(fd, READ_SIZE, 0) for fd in fds]
        if READ_SIZE in map(len, out):  # a counter file is far smaller; read on rather than cut it
            out = [self._rest(fd, data) if len(data) == READ_SIZE else data for fd, data in zip(fds, out, strict=True)]
        return out

    def sweep(self, live: Collection[Group]) -> None:
        """Close every group not in `live` (containers that went away)."""
        for group in [g for g in self._groups if g not in live]:
            self._close(group)

    def forget(self, group: Group) -> None:
        """Close one group's files (its container went away)."""
        self._close(group)

    def close(self) -> None:
        for group in list(self._groups):
            self._close(group)

    def _rest(self, fd: int, data: bytes) -> bytes:
        chunks = [data]
        offset = len(data)
        while len(chunk := self._pread(fd, READ_SIZE, offset)) > 0:
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def _read_new(self, group: Group) -> Texts:
        if self.open_count + len(group) > self.budget:
            self._exhausted(f"{self.open_count} counter files kept open, the budget under RLIMIT_NOFILE")
            return self._read_paths(group)
        try:
            opened = self.files.open_files(group)
        except CgroupNotFound:  # not there (yet), or in only some hierarchies: read what there is
            return self._read_paths(group)
        except CgroupError as err:
            if err.errno not in _EXHAUSTED:
                raise
            self.budget = max(self.open_count - ROOM_FOR_PATH_READS, 0)
            while self.open_count > self.budget:  # give back enough for the path reads to walk
                self._close(next(iter(self._groups)))
            self._exhausted(f"{err}")
            return self._read_paths(group)
        fds = [fd for fd in opened if fd is not None]
        if len(fds) < len(opened):  # a file the kernel does not offer here: read by path each time
            for fd in fds:
                os.close(fd)
            return self._read_paths(group)
        try:
            texts = self._read_fds(fds)
        except OSError as err:
            for fd in fds:
                os.close(fd)
            if err.errno in _STALE:  # gone again between the open and the read
                return self._read_paths(group)
            raise _read_error(group, err) from err
        self._groups[group] = fds
        self.open_count += len(fds)
        return texts

    def _read_paths(self, group: Group) -> Texts:
        try:
            texts, _ = self.files.read_many(group)
        except CgroupError as err:
            if err.errno in _EXHAUSTED:
                self._exhausted(f"{err}")
                return [None] * len(group)
            raise
        return [None if (t := texts.get(p)) is None else t.encode() for p in group]

    def _exhausted(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            self._warn(f"out of file descriptors for counter files ({why}); the rest are read by path")

    def _close(self, group: Group) -> None:
        fds = self._groups.pop(group, None)
        if fds is None:
            return
        self.open_count -= len(fds)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __len__(self) -> int:
        return len(self._groups)


def pinned_reader(files: CgroupFiles, warn: Callable[[str], None]) -> PinnedFiles:
    """A reader for a long-lived sampler: the descriptor limit raised first, then the budget taken."""
    raise_nofile_limit()
    return PinnedFiles(files, warn)

