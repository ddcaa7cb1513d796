"""The one module that opens cgroup files: one component at a time, no symlinks, errno -> typed errors.

Why one choke point: every write the agent makes lands in a kernel file that can throttle or kill
workloads. Every system call on the cgroup tree is made here, and only on a path `cgroupfs.confine` has
first confined beneath the agent's owned roots. The walk opens one component at a time relative to its
parent with O_NOFOLLOW (a bulk read opens each file in one openat2 call that refuses the same, `cgroupfs.openat2`),
so a symlink planted inside the tree cannot lead a write outside it, and writes
never create files (a file the kernel does not offer is an error, which also keeps fake trees honest).
The kernel's refusals become the typed errors of `cgroupfs.errors` through `cgroupfs.refusals`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from cgroupfs.confine import OwnedRoots, split_relpath
from cgroupfs.errors import CgroupError, CgroupNotFound, CgroupPathRefused, CgroupWriteError
from cgroupfs.openat2 import Opener, opener
from cgroupfs.refusals import classify, rmdir_refusal, write_refusal

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_SIZE: Final = 65536
# A read that returns less than this is the whole file: a regular file (a fake tree) reads short only at
# its end, and a kernel cgroup file is a seq_file, which returns less than asked only when its next record
# does not fit in what is left of its buffer (a page at least): with cgroup files' records of a line each,
# never below half a page. A longer first read is read on to its end.
_WHOLE_BELOW: Final = 2048
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC  # never O_CREAT


class _Walker:
    """Opens directories one component at a time below --cgroupfs, never following a symlink."""

    def __init__(self, cgroupfs: Path) -> None:
        self.cgroupfs = Path(cgroupfs)

    def _open_dir(self, op: str, relpath: str, parts: tuple[str, ...], value: str | None = None) -> int:
        """An fd of the directory `parts`; raises a CgroupError naming the component that failed."""
        try:
            fd = os.open(self.cgroupfs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise classify(op, relpath, err, value) from err
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
                raise classify(op, relpath, err, value) from err
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
            raise classify("read", relpath, err) from err
        return _read_fd(fd, relpath)

    def _read_grouped(
        self, by_dir: Mapping[tuple[str, ...], Sequence[tuple[str, str]]]
    ) -> tuple[dict[str, str | None], dict[str, bool]]:
        """Read many files: (contents by path, existence by directory). `by_dir` maps the components of a
        (confined) directory to its files, as (path, name). Each file is opened in one openat2 call beneath
        --cgroupfs that refuses any symlink on the way (`cgroupfs.openat2`). A directory whose first file
        that call cannot open (a missing cgroup, a symlink, a file where a directory should be), and every
        one where openat2 is not available, is walked one component at a time, which gives the answer or
        error `read` gives; directories in sorted order then share their leading components (`_OpenPath`)."""
        files: dict[str, str | None] = {}
        dirs: dict[str, bool] = {}
        beneath, top = _open_beneath(), None
        if beneath is not None:
            try:
                top = os.open(self.cgroupfs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                beneath = None  # the walk says why
        try:
            with _OpenPath(self.cgroupfs) as path:
                for dparts in by_dir if top is not None else sorted(by_dir):
                    members = by_dir[dparts]
                    if beneath is None or top is None:
                        self._read_walked(path, dparts, members, files, dirs)
                        continue
                    fd = -1
                    for rel, name in members:
                        try:
                            fd = beneath(top, rel)
                        except OSError:
                            if fd == -1:  # the first: the directory may be missing or hold a symlink: walk it
                                self._read_walked(path, dparts, members, files, dirs)
                                break
                            files[rel] = self._read(rel, (*dparts, name))  # absent (None), or its error
                            continue
                        files[rel] = _read_fd(fd, rel)
                    else:
                        dirs["/".join(dparts)] = True
        finally:
            if top is not None:
                os.close(top)
        return files, dirs

    def _read_walked(self, path: _OpenPath, dparts: tuple[str, ...], members: Sequence[tuple[str, str]],
                     files: dict[str, str | None], dirs: dict[str, bool]) -> None:
        """One directory's files read through the component-by-component walk, into `files` and `dirs`."""
        reldir = "/".join(dparts)
        dfd = own = path.descend(dparts)
        if dfd is None:  # a component failed: the one-by-one walk names it (or it exists by now)
            try:  # an error names the first file, as `read` of it would
                dfd = own = self._open_dir("read", members[0][0], dparts)
            except CgroupNotFound:
                dirs[reldir] = False
                files.update((rel, None) for rel, _ in members)
                return
        else:
            own = None  # the open path's, closed with it
        try:
            dirs[reldir] = True
            for rel, name in members:
                files[rel] = self._read_at(dfd, name, rel)
        finally:
            if own is not None:
                os.close(own)

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
            raise classify("list", relpath, err) from err
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


def _open_beneath() -> Opener | None:
    """openat2 for reading files, where the kernel has it (`cgroupfs.openat2`)."""
    return opener(_READ_FLAGS)


def _read_fd(fd: int, relpath: str) -> str | None:
    """An opened file's text, the descriptor closed; None when its cgroup was removed while it was read."""
    try:
        data = os.read(fd, _READ_SIZE)
        if len(data) >= _WHOLE_BELOW:
            data = _read_on(fd, data)
    except OSError as err:
        if err.errno == errno.ENODEV:  # the cgroup was removed while we read
            return None
        raise classify("read", relpath, err) from err
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def _read_on(fd: int, data: bytes) -> bytes:
    """The rest of a file whose first read was long (see `_WHOLE_BELOW`): read to the end, the read that
    returns nothing."""
    chunks = [data]
    while chunk := os.read(fd, _READ_SIZE):
        chunks.append(chunk)
    return b"".join(chunks)


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
        self._owned = OwnedRoots(owned_roots)
        self.owned_roots = self._owned.names
        self.writes = 0

    def read(self, relpath: str) -> str | None:
        """The file's text, None when the file or its cgroup does not exist."""
        return self._read(relpath, self._owned.confine("read", relpath, is_file=True))

    def read_many(self, relpaths: Iterable[str]) -> tuple[dict[str, str | None], dict[str, bool]]:
        """Read many files at once: their texts (None when absent) and whether each directory exists.

        Each path is confined as `read` confines it, before any file is opened; the first one refused (in
        the given order) raises what `read` would raise for it."""
        return self._read_grouped(self._owned.confine_files(relpaths))

    def open_files(self, relpaths: Sequence[str]) -> list[int | None]:
        """Read-only descriptors of files, in order (None for a file the kernel does not offer), for a
        caller that reads the same counters every second and keeps them open to pread them; the caller
        closes them. Each path is confined as for `read` and its directory walked once, one component at
        a time with O_NOFOLLOW. A missing cgroup raises CgroupNotFound; on any error nothing stays open."""
        confined = [(r, self._owned.confine("read", r, is_file=True)) for r in relpaths]
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
                    raise classify("read", rel, err) from err
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
        return self._exists(reldir, self._owned.confine("exists", reldir, is_file=False))

    def children(self, reldir: str) -> tuple[str, ...]:
        """The names of the child cgroups, sorted (for depth-first removal and orphan collection)."""
        return self._children(reldir, self._owned.confine("list", reldir, is_file=False))

    def write(self, relpath: str, value: str) -> None:
        """Write `value` to an existing kernel file in one write(2); raise a typed CgroupError on refusal."""
        parts = self._owned.confine("write", relpath, is_file=True, value=value)
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
        parts = self._owned.confine("mkdir", reldir, is_file=False)
        dfd = self._open_dir("mkdir", reldir, parts[:-1])
        try:
            os.mkdir(parts[-1], 0o755, dir_fd=dfd)
        except FileExistsError:
            os.close(self._open_dir("mkdir", reldir, parts))  # refuses a symlink or file in its place
            return False
        except OSError as err:
            raise classify("mkdir", reldir, err) from err
        finally:
            os.close(dfd)
        return True

    def rmdir(self, reldir: str) -> None:
        """Remove one empty cgroup (no processes, no children); CgroupNotFound if it is gone."""
        parts = self._owned.confine("rmdir", reldir, is_file=False)
        dfd = self._open_dir("rmdir", reldir, parts[:-1])
        try:
            os.rmdir(parts[-1], dir_fd=dfd)
        except OSError as err:
            raise rmdir_refusal(reldir, err) from err
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
        return write_refusal(relpath, parts[-1], value, err, lambda name: self._sibling_int(parts, name))
