"""The one module that opens cgroup files: path confinement, no symlinks, errno -> typed errors.

Why one choke point: every write the agent makes lands in a kernel file that can throttle or kill
workloads, so where it may write is decided here and only here. A path is a "/"-joined string relative
to --cgroupfs, built of validated components, and must lie beneath one of the agent's owned roots
("cpu/kubepods", "unified/kubepods"); anything else is refused before any system call. The walk opens
one component at a time relative to its parent with O_NOFOLLOW, so a symlink planted inside the tree
cannot lead a write outside it, and writes never create files (a file the kernel does not offer is an
error, which also keeps fake trees honest).

Errors are classified by what the caller should do (aesthetics principles 8-9): CgroupNotFound is the
benign "not there yet / already gone"; QuotaRefused, MemoryBelowUsage and MemswOrderRefused are kernel
refusals that another order or a later retry may fix; CgroupPermissionError and CgroupPathRefused are
permanent. Each names the path, the value and the reason on one line.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from cgroupfs.errors import DriverError
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

MAX_COMPONENT_BYTES: Final = 255  # NAME_MAX
MAX_PATH_BYTES: Final = 4095  # PATH_MAX - 1
MEMORY_MEMSW_USAGE: Final = "memory.memsw.usage_in_bytes"

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_SIZE: Final = 65536
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC  # never O_CREAT

_QUOTA_FILES: Final = frozenset({CPU_QUOTA, CPU_PERIOD, CPU_MAX})
_USAGE_OF: Final = {
    MEMORY_LIMIT: MEMORY_USAGE_V1,
    MEMORY_MEMSW: MEMORY_MEMSW_USAGE,
    MEMORY_MAX: MEMORY_CURRENT,
}
_PERMISSION: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


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


def split_relpath(relpath: str, op: str = "use") -> tuple[str, ...]:
    """The components of a path relative to --cgroupfs ("" is the top), each checked to be a plain name.

    Refused: absolute paths, empty, "." and ".." components, NUL and newline, names the kernel could
    not hold (over 255 bytes, or not encodable).
    """
    if not isinstance(relpath, str):
        raise CgroupPathRefused(op, repr(relpath), "path is not a string")
    if relpath == "":
        return ()
    if relpath.startswith("/"):
        raise CgroupPathRefused(op, relpath, "absolute path; paths are relative to --cgroupfs")
    if "\0" in relpath or "\n" in relpath:
        raise CgroupPathRefused(op, relpath, "path holds a NUL or newline")
    ascii_only = relpath.isascii()  # then a character is a byte: no encoding needed to measure
    try:
        size = len(relpath) if ascii_only else len(os.fsencode(relpath))
    except UnicodeError:
        raise CgroupPathRefused(op, relpath, "path is not encodable as a file name") from None
    if size > MAX_PATH_BYTES:
        raise CgroupPathRefused(op, relpath, f"path longer than {MAX_PATH_BYTES} bytes")
    parts = tuple(relpath.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise CgroupPathRefused(op, relpath, f"path component {part!r} is not a plain name")
        if (len(part) if ascii_only else len(os.fsencode(part))) > MAX_COMPONENT_BYTES:
            raise CgroupPathRefused(op, relpath, f"path component longer than {MAX_COMPONENT_BYTES} bytes")
    return parts


def _errno_name(code: int | None) -> str:
    return errno.errorcode.get(code or 0, f"errno {code}")


def _oserror(op: str, relpath: str, err: OSError, value: str | None = None) -> CgroupError:
    """The classification shared by every operation; writes refine it in `CgroupFiles._write_error`."""
    code = err.errno
    detail = f"{_errno_name(code)}: {err.strerror or err}"
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


class _Walker:
    """Opens directories one component at a time below --cgroupfs, never following a symlink."""

    def __init__(self, cgroupfs: Path) -> None:
        self.cgroupfs = Path(cgroupfs)

    def _open_dir(self, op: str, relpath: str, parts: tuple[str, ...], value: str | None = None) -> int:
        """An fd of the directory `parts`; raises a CgroupError naming the component that failed."""
        try:
            fd = os.open(self.cgroupfs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise _oserror(op, relpath, err, value) from err
        for i, part in enumerate(parts):
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                where = "/".join(parts[: i + 1])
                if err.errno == errno.ENOTDIR:
                    symlink = _is_symlink(fd, part)
                    os.close(fd)
                    if symlink:
                        raise CgroupPathRefused(
                            op, relpath, f"{where} is a symlink, which is never followed", value, err.errno
                        ) from err
                    raise CgroupNotFound(
                        op, relpath, f"{where} is a file, not a cgroup directory", value, err.errno
                    ) from err
                os.close(fd)
                if err.errno == errno.ENOENT:
                    raise CgroupNotFound(
                        op, relpath, f"cgroup {where} does not exist", value, err.errno
                    ) from err
                raise _oserror(op, relpath, err, value) from err
            os.close(fd)
            fd = nfd
        return fd

    def _read(self, relpath: str, parts: tuple[str, ...]) -> str | None:
        if not parts:
            raise CgroupPathRefused("read", relpath, "the top of the tree is not a file")
        try:
            dfd = self._open_dir("read", relpath, parts[:-1])
        except CgroupNotFound:
            return None
        try:
            return self._read_at(dfd, parts[-1], relpath)
        finally:
            os.close(dfd)

    def _read_at(self, dfd: int, name: str, relpath: str) -> str | None:
        """Read `name` inside an already opened (and so already confined) directory."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
        except OSError as err:
            if err.errno == errno.ENOENT:
                return None
            raise _oserror("read", relpath, err) from err
        try:
            data = os.read(fd, _READ_SIZE)
            if data:  # the end is the read that returns nothing (a short read is not the end of a kernel file)
                while chunk := os.read(fd, _READ_SIZE):
                    data += chunk
        except OSError as err:
            if err.errno == errno.ENODEV:  # the cgroup was removed while we read
                return None
            raise _oserror("read", relpath, err) from err
        finally:
            os.close(fd)
        return data.decode("utf-8", errors="replace")

    def _read_grouped(
        self, by_dir: Mapping[tuple[str, ...], Sequence[tuple[str, str]]]
    ) -> tuple[dict[str, str | None], dict[str, bool]]:
        """Read many files, walking each directory once: (contents by path, existence by directory).

        `by_dir` maps the components of a (confined) directory to its files, as (path, name). A node has
        tens of thousands of such files; opening every path component again for each file dominated the
        agent's time, so files are grouped by their directory, and directories in sorted order share
        their leading components (`_OpenPath`).
        """
        files: dict[str, str | None] = {}
        dirs: dict[str, bool] = {}
        with _OpenPath(self.cgroupfs) as path:
            for dparts in sorted(by_dir):
                members = by_dir[dparts]
                reldir = "/".join(dparts)
                dfd = own = path.descend(dparts)
                if dfd is None:  # a component failed: the one-by-one walk names it (or it exists by now)
                    try:  # an error names the first file, as `read` of it would
                        dfd = own = self._open_dir("read", members[0][0], dparts)
                    except CgroupNotFound:
                        dirs[reldir] = False
                        files.update((rel, None) for rel, _ in members)
                        continue
                else:
                    own = None  # the open path's, closed with it
                try:
                    dirs[reldir] = True
                    for rel, name in members:
                        files[rel] = self._read_at(dfd, name, rel)
                finally:
                    if own is not None:
                        os.close(own)
        return files, dirs

    def _exists(self, relpath: str, parts: tuple[str, ...]) -> bool:
        try:
            fd = self._open_dir("exists", relpath, parts)
        except CgroupNotFound:
            return False
        os.close(fd)
        return True

    def _children(self, relpath: str, parts: tuple[str, ...]) -> tuple[str, ...]:
        fd = self._open_dir("list", relpath, parts)
        try:
            with os.scandir(fd) as it:
                return tuple(sorted(e.name for e in it if e.is_dir(follow_symlinks=False)))
        except OSError as err:
            raise _oserror("list", relpath, err) from err
        finally:
            os.close(fd)


class _OpenPath:
    """One directory open below --cgroupfs with all its ancestors, to go from one directory to the next
    opening only the components they do not share; each is opened relative to its parent with the flags
    of `_Walker._open_dir` (no symlink followed). Closes what it holds on exit."""

    def __init__(self, cgroupfs: Path) -> None:
        self._cgroupfs = cgroupfs
        self._parts: list[str] = []  # the components open below the top
        self._fds: list[int] = []  # the top's fd, then one per component

    def __enter__(self) -> _OpenPath:
        return self

    def __exit__(self, *_: object) -> None:
        while self._fds:
            os.close(self._fds.pop())
        self._parts.clear()

    def descend(self, parts: tuple[str, ...]) -> int | None:
        """The fd of the directory `parts`, or None when one of its components cannot be opened (what
        did open is kept)."""
        if not self._fds:
            try:
                self._fds.append(os.open(self._cgroupfs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            except OSError:
                return None
        held, shared = self._parts, 0
        while shared < len(held) and shared < len(parts) and held[shared] == parts[shared]:
            shared += 1
        while len(held) > shared:
            held.pop()
            os.close(self._fds.pop())
        for part in parts[shared:]:
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self._fds[-1])
            except OSError:
                return None
            self._fds.append(fd)
            held.append(part)
        return self._fds[-1]


def _name_size(name: str) -> int | None:
    """The size in bytes of a plain file name (one path component as `split_relpath` accepts it); None for
    anything else."""
    try:
        parts = split_relpath(name, "read")
    except CgroupPathRefused:
        return None
    if len(parts) != 1:
        return None
    return len(name) if name.isascii() else len(os.fsencode(name))


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class TreeReader(_Walker):
    """Read-only access anywhere below --cgroupfs (mode detection, `check`); it cannot write."""

    def read(self, relpath: str) -> str | None:
        """The file's text, None when the file or its cgroup does not exist."""
        return self._read(relpath, split_relpath(relpath, "read"))

    def exists(self, reldir: str) -> bool:
        return self._exists(reldir, split_relpath(reldir, "exists"))

    def children(self, reldir: str) -> tuple[str, ...]:
        """The names of the real subdirectories (child cgroups), sorted; symlinks are left out."""
        return self._children(reldir, split_relpath(reldir, "list"))


class CgroupFiles(_Walker):
    """Reads and writes cgroup files beneath the agent's owned roots, and nowhere else.

    `writes` counts successful file writes (what `apply` reports; directory creation is not a write).
    """

    def __init__(self, cgroupfs: Path, owned_roots: Iterable[str]) -> None:
        super().__init__(cgroupfs)
        roots = tuple(owned_roots)
        self._roots: tuple[tuple[str, ...], ...] = tuple(split_relpath(r, "own") for r in roots)
        if any(not r for r in self._roots):
            raise ValueError("an owned root cannot be the whole cgroup tree")
        self.owned_roots = roots
        self.writes = 0

    def _confine(self, op: str, relpath: str, *, is_file: bool, value: str | None = None) -> tuple[str, ...]:
        """The validated components of `relpath` if it lies beneath an owned root (a directory may also
        be the root itself); raises CgroupPathRefused otherwise, before any system call."""
        parts = split_relpath(relpath, op)
        for root in self._roots:
            if parts[: len(root)] == root and (len(parts) > len(root) or not is_file):
                return parts
        owned = ", ".join(self.owned_roots) or "nothing"
        raise CgroupPathRefused(op, relpath, f"outside the cgroups this agent owns ({owned})", value)

    def read(self, relpath: str) -> str | None:
        """The file's text, None when the file or its cgroup does not exist."""
        return self._read(relpath, self._confine("read", relpath, is_file=True))

    def read_many(self, relpaths: Iterable[str]) -> tuple[dict[str, str | None], dict[str, bool]]:
        """Read many files at once: their texts (None when absent) and whether each directory exists.

        Each path is confined as `read` confines it, before any file is opened; the first one refused (in
        the given order) raises what `read` would raise for it."""
        return self._read_grouped(self._confine_files(relpaths))

    def _confine_files(self, relpaths: Iterable[str]) -> dict[tuple[str, ...], list[tuple[str, str]]]:
        """The files grouped by their directory's components, each path confined exactly as `_confine`
        confines a file. A node's tens of thousands of paths lie in a few thousand directories and bear a
        dozen names: each directory and each name is checked once, and a path only for its total size.
        Anything the shortcut does not accept goes through `_confine`, which names the path and the reason."""
        dirs: dict[str, tuple[tuple[str, ...], int] | None] = {}
        names: dict[str, int | None] = {}
        groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for relpath in relpaths:
            if isinstance(relpath, str):
                directory, _, name = relpath.rpartition("/")
                if directory not in dirs:
                    dirs[directory] = self._owned_dir(directory, dirs)
                if name not in names:
                    names[name] = _name_size(name)
                owned, size = dirs[directory], names[name]
                if owned is not None and size is not None and owned[1] + 1 + size <= MAX_PATH_BYTES:
                    groups.setdefault(owned[0], []).append((relpath, name))
                    continue
            parts = self._confine("read", relpath, is_file=True)  # the whole check: a refusal names path and reason
            groups.setdefault(parts[:-1], []).append((relpath, parts[-1]))
        return groups

    def _owned_dir(
        self, directory: str, known: Mapping[str, tuple[tuple[str, ...], int] | None]
    ) -> tuple[tuple[str, ...], int] | None:
        """The components and size in bytes of a directory beneath an owned root (or the root itself), which
        may hold the files the agent reads; None for any other. Below a directory already `known` to be
        owned, only the last component is checked."""
        parent, _, last = directory.rpartition("/")
        above = known.get(parent) if parent else None
        size = _name_size(last) if above is not None else None
        if above is not None and size is not None:
            total = above[1] + 1 + size
            return ((*above[0], last), total) if total <= MAX_PATH_BYTES else None
        try:
            parts = split_relpath(directory, "read")
        except CgroupPathRefused:
            return None
        if not any(parts[: len(root)] == root for root in self._roots):
            return None
        return parts, len(directory) if directory.isascii() else len(os.fsencode(directory))

    def open_files(self, relpaths: Sequence[str]) -> list[int | None]:
        """Read-only descriptors of files, in order (None for a file the kernel does not offer), for a
        caller that reads the same counters every second and keeps them open to pread them; the caller
        closes them. Each path is confined as for `read` and its directory walked once, one component at
        a time with O_NOFOLLOW. A missing cgroup raises CgroupNotFound; on any error nothing stays open."""
        confined = [(r, self._confine("read", r, is_file=True)) for r in relpaths]
        fds: list[int | None] = []
        dirs: dict[tuple[str, ...], int] = {}
        try:
            for rel, parts in confined:
                dfd = dirs.get(parts[:-1])
                if dfd is None:
                    dfd = dirs[parts[:-1]] = self._open_dir("read", rel, parts[:-1])
                try:
                    fds.append(os.open(parts[-1], _READ_FLAGS, dir_fd=dfd))
                except FileNotFoundError:
                    fds.append(None)
                except OSError as err:
                    raise _oserror("read", rel, err) from err
        except BaseException:
            for fd in fds:
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for dfd in dirs.values():
                os.close(dfd)
        return fds

    def exists(self, reldir: str) -> bool:
        return self._exists(reldir, self._confine("exists", reldir, is_file=False))

    def children(self, reldir: str) -> tuple[str, ...]:
        """The names of the child cgroups, sorted (for depth-first removal and orphan collection)."""
        return self._children(reldir, self._confine("list", reldir, is_file=False))

    def write(self, relpath: str, value: str) -> None:
        """Write `value` to an existing kernel file in one write(2); raise a typed CgroupError on refusal."""
        parts = self._confine("write", relpath, is_file=True, value=value)
        if "\0" in value:
            raise CgroupWriteError("write", relpath, "the value holds a NUL byte", value)
        data = value.encode()
        dfd = self._open_dir("write", relpath, parts[:-1], value)
        try:
            fd = os.open(parts[-1], _WRITE_FLAGS, dir_fd=dfd)
        except OSError as err:
            raise self._write_error(relpath, parts, value, err) from err
        finally:
            os.close(dfd)
        try:
            written = os.write(fd, data)
        except OSError as err:
            raise self._write_error(relpath, parts, value, err) from err
        finally:
            os.close(fd)
        if written != len(data):
            raise CgroupWriteError("write", relpath, f"short write ({written} of {len(data)} bytes)", value)
        self.writes += 1

    def mkdir(self, reldir: str) -> bool:
        """Create one cgroup (its parent must exist); False if it was already there. Used for QoS tiers
        only when the settings ask for it, and by tests."""
        parts = self._confine("mkdir", reldir, is_file=False)
        dfd = self._open_dir("mkdir", reldir, parts[:-1])
        try:
            os.mkdir(parts[-1], 0o755, dir_fd=dfd)
        except FileExistsError:
            os.close(self._open_dir("mkdir", reldir, parts))  # refuses a symlink or file in its place
            return False
        except OSError as err:
            raise _oserror("mkdir", reldir, err) from err
        finally:
            os.close(dfd)
        return True

    def rmdir(self, reldir: str) -> None:
        """Remove one empty cgroup (no processes, no children); CgroupNotFound if it is gone."""
        parts = self._confine("rmdir", reldir, is_file=False)
        dfd = self._open_dir("rmdir", reldir, parts[:-1])
        try:
            os.rmdir(parts[-1], dir_fd=dfd)
        except OSError as err:
            if err.errno in (errno.EBUSY, errno.ENOTEMPTY):
                raise CgroupWriteError(
                    "rmdir",
                    reldir,
                    f"the cgroup still has processes or child cgroups ({_errno_name(err.errno)})",
                    errno_=err.errno,
                ) from err
            if err.errno == errno.ENOTDIR:
                raise CgroupPathRefused("rmdir", reldir, "not a cgroup directory", errno_=err.errno) from err
            raise _oserror("rmdir", reldir, err) from err
        finally:
            os.close(dfd)

    def _sibling_int(self, parts: tuple[str, ...], name: str) -> int | None:
        """A number from another file of the same cgroup (for error messages); None if unreadable."""
        try:
            text = self._read("/".join((*parts[:-1], name)), (*parts[:-1], name))
            return int(text.strip()) if text is not None else None
        except (CgroupError, ValueError):
            return None

    def _write_error(self, relpath: str, parts: tuple[str, ...], value: str, err: OSError) -> CgroupError:
        name, code = parts[-1], err.errno
        if code == errno.ENOENT:
            return CgroupNotFound(
                "write",
                relpath,
                "no such file in this cgroup (the kernel does not offer it here)",
                value,
                code,
            )
        if code == errno.EBUSY and name in _USAGE_OF:
            usage = self._sibling_int(parts, _USAGE_OF[name])
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
            bound = self._sibling_int(parts, other)
            if bound is not None:
                rule = (
                    "memory must stay <= memory+swap; raise memory.memsw.limit_in_bytes first"
                    if name == MEMORY_LIMIT
                    else "memory+swap must stay >= memory; lower memory.limit_in_bytes first"
                )
                return MemswOrderRefused(
                    "write", relpath, f"EINVAL: {rule} (now {other} = {bound})", value, code
                )
        return _oserror("write", relpath, err, value)
