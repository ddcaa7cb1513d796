"""Where the cgroup hierarchies are: a pure parser of /proc/self/mountinfo, plus `detect_hierarchy`.

The parser turns mountinfo text into the `Hierarchy` of cgroupfs.layout (directories relative to
--cgroupfs), so the same code serves the real node, a DaemonSet's /host/sys/fs/cgroup and captured text
in tests. `detect_hierarchy` is the thin shell: it uses the mount table when --cgroupfs really holds the
cgroup mounts, and otherwise infers the layout from the directory tree (sample and fake trees are plain
directories that no mount table knows about).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from cgroupfs.errors import CgroupError, DriverError
from cgroupfs.files import TreeReader
from cgroupfs.layout import Hierarchy

MOUNTINFO: Final = Path("/proc/self/mountinfo")

V1_CONTROLLERS: Final = frozenset(
    {
        "blkio",
        "cpu",
        "cpuacct",
        "cpuset",
        "devices",
        "freezer",
        "hugetlb",
        "memory",
        "misc",
        "net_cls",
        "net_prio",
        "perf_event",
        "pids",
        "rdma",
    }
)
"""The kernel's v1 controller names. Super options hold these next to flags (rw, noprefix, xattr) and
named hierarchies (name=systemd), so controllers are picked by name, not by elimination."""

VERSIONS: Final = ("auto", "1", "2")


class HierarchyNotFound(DriverError, ValueError):
    """No cgroup hierarchy (of the version asked for) under --cgroupfs: nothing can be read or written."""


@dataclass(frozen=True, slots=True)
class CgroupMount:
    """One cgroup or cgroup2 line of mountinfo."""

    mount_point: str  # absolute, unescaped
    fstype: str  # "cgroup" or "cgroup2"
    controllers: frozenset[str]  # v1 controllers from the super options; empty for cgroup2


_ESCAPE: Final = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """mountinfo octal-escapes space, tab, newline and backslash in paths ("\\040")."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[CgroupMount, ...]:
    """The cgroup and cgroup2 mounts of a mountinfo text, in order; other lines are skipped.

    A line is "id parent major:minor root mount-point options [optional fields...] - fstype source
    super-options"; the optional fields vary in number, so the " - " separator is searched for.
    """
    out: list[CgroupMount] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        fstype = fields[sep + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        options = fields[sep + 3].split(",") if len(fields) > sep + 3 else []
        controllers = frozenset(o for o in options if o in V1_CONTROLLERS) if fstype == "cgroup" else frozenset()
        out.append(CgroupMount(_unescape(fields[4]), fstype, controllers))
    return tuple(out)


def _relative(mount_point: str, cgroupfs: str) -> str | None:
    """The mount point relative to --cgroupfs ("" for --cgroupfs itself), None when outside it."""
    mp, base = PurePosixPath(mount_point), PurePosixPath(cgroupfs)
    if mp == base:
        return ""
    if base in mp.parents:
        return mp.relative_to(base).as_posix()
    return None


def _visible(mounts: Iterable[CgroupMount], cgroupfs: str) -> dict[str, CgroupMount]:
    """Mounts at or below --cgroupfs by relative directory; a later mount on the same point hides an
    earlier one, as it does in the kernel."""
    out: dict[str, CgroupMount] = {}
    for m in mounts:
        rel = _relative(m.mount_point, cgroupfs)
        if rel is not None:
            out[rel] = m
    return out


def unified_mount(mounts: Iterable[CgroupMount], cgroupfs: str) -> str | None:
    """The cgroup2 mount directory relative to --cgroupfs ("" on a pure v2 host), None if there is none.

    The caller reads `<cgroupfs>/<dir>/cgroup.controllers` and hands it to `hierarchy_from_mounts`.
    """
    found = [rel for rel, m in _visible(mounts, cgroupfs).items() if m.fstype == "cgroup2"]
    return min(found, key=_depth_then_name) if found else None


def _depth_then_name(rel: str) -> tuple[int, str]:
    return (rel.count("/") + (1 if rel else 0), rel)


def hierarchy_from_mounts(
    mounts: Iterable[CgroupMount], cgroupfs: str, unified_controllers: str | None = None
) -> Hierarchy:
    """The `Hierarchy` below --cgroupfs. `unified_controllers` is the text of the cgroup2 mount's
    cgroup.controllers ("cpu memory hugetlb"); None means it could not be read (no controllers).

    Each v1 controller maps to its mount directory: "cpu" on this kind of host, "cpu,cpuacct" for both
    cpu and cpuacct where they are co-mounted. Named hierarchies without controllers (name=systemd) are
    ignored. If a controller is mounted twice, the shallowest mount point wins.
    """
    visible = _visible(mounts, cgroupfs)
    v1: dict[str, str] = {}
    for rel in sorted(visible, key=_depth_then_name):
        m = visible[rel]
        if m.fstype == "cgroup" and rel:
            for controller in m.controllers:
                v1.setdefault(controller, rel)
    unified = unified_mount(visible.values(), cgroupfs)
    controllers = frozenset((unified_controllers or "").split()) if unified is not None else frozenset()
    return Hierarchy(v1=dict(sorted(v1.items())), unified=unified, unified_controllers=controllers)


def force_version(hierarchy: Hierarchy, version: str) -> Hierarchy:
    """--cgroup-version: "1" keeps only the v1 mounts, "2" only the unified one, "auto" all of them."""
    if version not in VERSIONS:
        raise ValueError(f"cgroup version must be one of {', '.join(VERSIONS)}, not {version!r}")
    if version == "1":
        return Hierarchy(v1=hierarchy.v1)
    if version == "2":
        return Hierarchy(unified=hierarchy.unified, unified_controllers=hierarchy.unified_controllers)
    return hierarchy


def is_empty(hierarchy: Hierarchy) -> bool:
    return not hierarchy.v1 and hierarchy.unified is None


def hierarchy_from_layout(
    top_dirs: Iterable[str], top_controllers: str | None, unified_controllers: str | None
) -> Hierarchy:
    """Infer the hierarchy of a plain directory tree (a sample or fake --cgroupfs).

    `top_dirs` are the real subdirectories of --cgroupfs; `top_controllers` the text of
    `<cgroupfs>/cgroup.controllers` (a pure v2 tree) and `unified_controllers` that of
    `<cgroupfs>/unified/cgroup.controllers` (a hybrid tree), None where the file is absent.
    A directory named after controllers ("memory", "cpu,cpuacct") is their v1 hierarchy.
    """
    if top_controllers is not None:
        return Hierarchy(unified="", unified_controllers=frozenset(top_controllers.split()))
    v1: dict[str, str] = {}
    for name in sorted(top_dirs):
        parts = name.split(",")
        if all(p in V1_CONTROLLERS for p in parts):
            for p in parts:
                # a co-mounted "cpu,cpuacct" wins over a lone "cpu" that would only be its symlink
                if p not in v1 or len(parts) > len(v1[p].split(",")):
                    v1[p] = name
    if unified_controllers is not None:
        return Hierarchy(
            v1=dict(sorted(v1.items())), unified="unified", unified_controllers=frozenset(unified_controllers.split())
        )
    return Hierarchy(v1=dict(sorted(v1.items())))


def detect_hierarchy(cgroupfs: Path, mountinfo: Path = MOUNTINFO, version: str = "auto") -> Hierarchy:
    """The hierarchy under --cgroupfs: from the mount table when --cgroupfs holds cgroup mounts, else from
    the directory layout; `version` "1" or "2" keeps only that version. Raises HierarchyNotFound."""
    if version not in VERSIONS:
        raise ValueError(f"cgroup version must be one of {', '.join(VERSIONS)}, not {version!r}")
    base = os.path.realpath(cgroupfs)
    if not Path(base).is_dir():
        raise HierarchyNotFound(f"--cgroupfs {cgroupfs} is not a directory")
    reader = TreeReader(Path(base))
    try:
        mounts = parse_mountinfo(mountinfo.read_text(encoding="utf-8", errors="surrogateescape"))
    except FileNotFoundError:
        mounts = ()
    source = f"the mount table ({mountinfo})"
    try:
        if _visible(mounts, base):
            unified = unified_mount(mounts, base)
            text = reader.read(_join(unified, "cgroup.controllers")) if unified is not None else None
            found = hierarchy_from_mounts(mounts, base, text)
        else:
            source = "the directory layout"
            found = hierarchy_from_layout(
                reader.children(""), reader.read("cgroup.controllers"), reader.read("unified/cgroup.controllers")
            )
    except CgroupError as err:
        raise HierarchyNotFound(f"cannot inspect {cgroupfs}: {err}") from err
    hierarchy = force_version(found, version)
    if is_empty(hierarchy):
        wanted = "cgroup" if version == "auto" else f"cgroup v{version}"
        raise HierarchyNotFound(
            f"found no {wanted} hierarchy under {cgroupfs} (looked at {source}: "
            "v1 needs controller directories such as cpu/ and memory/, v2 a cgroup.controllers file)"
        )
    return hierarchy


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name

