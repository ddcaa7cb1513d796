"""Where the agent may touch the cgroup tree, decided before any system call.

Every write the agent makes lands in a kernel file that can throttle or kill workloads, so where it may
write is decided here and only here. A path is a "/"-joined string relative to --cgroupfs, built of
validated components, and must lie beneath one of the agent's owned roots ("cpu/kubepods",
"unified/kubepods"); anything else is refused with CgroupPathRefused. Pure: `cgroupfs.files` confines
each path here and only then opens it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Final

from cgroupfs.errors import CgroupPathRefused

MAX_COMPONENT_BYTES: Final = 255  # NAME_MAX
MAX_PATH_BYTES: Final = 4095  # PATH_MAX - 1


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


class OwnedRoots:
    """The subtrees the agent owns; a path is confined when it lies beneath one of them."""

    def __init__(self, owned_roots: Iterable[str]) -> None:
        self.names = tuple(owned_roots)
        self._roots: tuple[tuple[str, ...], ...] = tuple(split_relpath(r, "own") for r in self.names)
        if any(not r for r in self._roots):
            raise ValueError("an owned root cannot be the whole cgroup tree")

    def confine(self, op: str, relpath: str, *, is_file: bool, value: str | None = None) -> tuple[str, ...]:
        """The validated components of `relpath` if it lies beneath an owned root (a directory may also
        be the root itself); raises CgroupPathRefused otherwise."""
        parts = split_relpath(relpath, op)
        for root in self._roots:
            if parts[: len(root)] == root and (len(parts) > len(root) or not is_file):
                return parts
        owned = ", ".join(self.names) or "nothing"
        raise CgroupPathRefused(op, relpath, f"outside the cgroups this agent owns ({owned})", value)

    def confine_files(self, relpaths: Iterable[str]) -> dict[tuple[str, ...], list[tuple[str, str]]]:
        """The files grouped by their directory's components, as (path, name), each path confined exactly
        as `confine` confines a file to be read. A node's tens of thousands of paths lie in a few thousand
        directories and bear a dozen names: each directory and each name is checked once, and a path only
        for its total size. Anything the shortcut does not accept goes through `confine`, which names the
        path and the reason; the first path refused (in the given order) raises."""
        dirs: dict[str, tuple[tuple[str, ...], int] | None] = {}
        names: dict[str, int | None] = {}
        known: dict[str, list[tuple[str, str]]] = {}  # an owned directory's files, by the directory's path
        others: list[tuple[tuple[str, ...], str, str]] = []  # what only the whole check accepted
        for relpath in relpaths:
            if isinstance(relpath, str):
                directory, _, name = relpath.rpartition("/")
                if directory not in dirs:
                    dirs[directory] = self._owned_dir(directory, dirs)
                if name not in names:
                    names[name] = _name_size(name)
                owned, size = dirs[directory], names[name]
                if owned is not None and size is not None and owned[1] + 1 + size <= MAX_PATH_BYTES:
                    known.setdefault(directory, []).append((relpath, name))
                    continue
            parts = self.confine("read", relpath, is_file=True)  # the whole check: a refusal names path and reason
            others.append((parts[:-1], relpath, parts[-1]))
        groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for directory, members in known.items():
            owned = dirs[directory]
            assert owned is not None
            groups[owned[0]] = members
        for dparts, relpath, name in others:
            groups.setdefault(dparts, []).append((relpath, name))
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
