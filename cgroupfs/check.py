"""`kube-cgroup-agent check`: environment diagnostics as data.

Each check is (name, verdict, one-line detail); the verdict functions are pure so every message can be
pinned by a table test, and `probe` is the thin shell that gathers the facts (mount table, tree, huge
pages, kubelet config, CRI socket, access rights). Rendering and exit codes belong to the CLI.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from cgroupfs.convert import hugepage_size_name
from cgroupfs.errors import CgroupError
from cgroupfs.files import TreeReader
from cgroupfs.hugepages import HUGEPAGES_DIR, node_hugepage_sizes
from cgroupfs.layout import Hierarchy
from cgroupfs.mounts import MOUNTINFO, HierarchyNotFound, detect_hierarchy
from cgroupfs.naming import cgroup_dir, parse_cgroup_root
from cgroupfs.types import DriverKind, NameError_

KUBELET_CONFIG: Final = Path("/var/lib/kubelet/config.yaml")
CHECKED_CONTROLLERS: Final = ("cpu", "memory", "hugetlb", "cpuset", "pids")
WRITTEN_CONTROLLERS: Final = ("cpu", "memory", "hugetlb")  # the hierarchies the agent writes to
KUBELET_DEFAULT_DRIVER: Final = DriverKind.CGROUPFS  # KubeletConfiguration v1beta1 default


class Verdict(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    verdict: Verdict
    detail: str


@dataclass(frozen=True, slots=True)
class KubeletCgroups:
    """The kubelet's cgroup settings as its config file states them (defaults filled in)."""

    driver: DriverKind
    root: str
    driver_defaulted: bool
    source: str


# ----- pure: facts -> checks


def controller_location(hierarchy: Hierarchy, controller: str) -> tuple[str, str] | None:
    """("v1", mount dir) or ("v2", unified dir) for any controller name, None when absent."""
    if controller in hierarchy.v1:
        return "v1", hierarchy.v1[controller]
    if hierarchy.unified is not None and controller in hierarchy.unified_controllers:
        return "v2", hierarchy.unified or "."
    return None


def mode_check(hierarchy: Hierarchy) -> Check:
    v1 = ", ".join(sorted(hierarchy.v1)) or "none"
    v2 = ", ".join(sorted(hierarchy.unified_controllers)) or "none"
    where = f"unified at {hierarchy.unified or '.'}" if hierarchy.unified is not None else "no unified mount"
    return Check("cgroup mode", Verdict.OK, f"{hierarchy.mode}: v1 controllers {v1}; v2 controllers {v2} ({where})")


def controller_checks(hierarchy: Hierarchy, hugepage_sizes: Sequence[int]) -> list[Check]:
    """cpu and memory are required; hugetlb matters only when the node has huge pages; the kubelet
    also uses cpuset (CPU manager) and pids (pod PID limits), so their absence is a warning."""
    out: list[Check] = []
    for controller in CHECKED_CONTROLLERS:
        loc = controller_location(hierarchy, controller)
        name = f"controller {controller}"
        if loc is not None:
            out.append(Check(name, Verdict.OK, f"{loc[0]} at {loc[1]}"))
        elif controller in ("cpu", "memory"):
            out.append(Check(name, Verdict.FAIL, f"absent: pod and QoS {controller} values cannot be applied"))
        elif controller == "hugetlb" and not hugepage_sizes:
            out.append(Check(name, Verdict.OK, "absent, and the node has no huge pages"))
        elif controller == "hugetlb":
            out.append(Check(name, Verdict.WARN, "absent although the node has huge pages: limits are skipped"))
        else:
            out.append(Check(name, Verdict.WARN, "absent: the kubelet expects it"))
    return out


def hugepage_check(sizes: Sequence[int]) -> Check:
    shown = ", ".join(hugepage_size_name(s) for s in sizes) if sizes else "none"
    return Check("huge page sizes", Verdict.OK, shown)


def parse_kubelet_config(text: str, source: str) -> KubeletCgroups:
    """cgroupDriver and cgroupRoot from a KubeletConfiguration file; raises ValueError when unusable."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{source} is not YAML: {str(err).splitlines()[0]}") from err
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ValueError(f"{source} is not a KubeletConfiguration mapping")
    kind = doc.get("kind")
    if kind not in (None, "KubeletConfiguration"):
        raise ValueError(f"{source} holds a {kind}, not a KubeletConfiguration")
    raw_driver = doc.get("cgroupDriver")
    try:
        driver = DriverKind(raw_driver) if raw_driver is not None else KUBELET_DEFAULT_DRIVER
    except ValueError:
        raise ValueError(f"{source}: cgroupDriver {raw_driver!r} is neither cgroupfs nor systemd") from None
    root = doc.get("cgroupRoot") or "/"
    if not isinstance(root, str):
        raise ValueError(f"{source}: cgroupRoot {root!r} is not a string")
    return KubeletCgroups(driver, root, raw_driver is None, source)


def infer_driver(has_kubepods: Mapping[DriverKind, bool]) -> DriverKind | None:
    """systemd when the tree holds kubepods.slice, cgroupfs when it holds kubepods, else unknown."""
    found = [d for d, present in has_kubepods.items() if present]
    return found[0] if len(found) == 1 else None


def _tree_words(has_kubepods: Mapping[DriverKind, bool]) -> str:
    found = [d for d, present in has_kubepods.items() if present]
    if not found:
        return "the tree has neither kubepods nor kubepods.slice"
    names = {DriverKind.CGROUPFS: "kubepods", DriverKind.SYSTEMD: "kubepods.slice"}
    return "the tree has " + " and ".join(f"{names[d]} ({d})" for d in found)


def driver_checks(
    kubelet: KubeletCgroups | None,
    kubelet_problem: str | None,
    has_kubepods: Mapping[DriverKind, bool],
    agent_driver: DriverKind | None = None,
    agent_root: str | None = None,
) -> list[Check]:
    """The kubelet's cgroup driver and root: from its config when given, else inferred from the tree,
    and compared with the agent's own --cgroup-driver / --cgroup-root when those are given."""
    tree = infer_driver(has_kubepods)
    words = _tree_words(has_kubepods)
    out: list[Check] = []
    driver: DriverKind | None
    if kubelet is not None:
        driver = kubelet.driver
        how = "default, not set" if kubelet.driver_defaulted else "set"
        detail = f"{driver} ({how} in {kubelet.source})"
        if tree is not None and tree is not driver:
            out.append(Check("kubelet cgroup driver", Verdict.WARN, f"{detail}, but {words}"))
        else:
            out.append(Check("kubelet cgroup driver", Verdict.OK, detail))
    else:
        driver = tree
        prefix = f"{kubelet_problem}; " if kubelet_problem else ""
        if driver is None:
            out.append(Check("kubelet cgroup driver", Verdict.WARN, f"{prefix}unknown: {words}"))
        else:
            verdict = Verdict.WARN if kubelet_problem else Verdict.OK
            out.append(Check("kubelet cgroup driver", verdict, f"{prefix}{driver} (inferred: {words})"))
    if agent_driver is not None and driver is not None and agent_driver is not driver:
        out.append(
            Check(
                "agent cgroup driver",
                Verdict.FAIL,
                f"the agent uses --cgroup-driver {agent_driver} but the kubelet uses {driver}",
            )
        )
    if kubelet is not None:
        root_detail = f"{kubelet.root} (from {kubelet.source})"
        if agent_root is not None and _same_root(agent_root, kubelet.root, kubelet.driver):
            out.append(Check("kubelet cgroup root", Verdict.OK, root_detail))
        elif agent_root is not None:
            out.append(
                Check("kubelet cgroup root", Verdict.FAIL, f"{root_detail}, but the agent uses --cgroup-root {agent_root}")
            )
        else:
            out.append(Check("kubelet cgroup root", Verdict.OK, root_detail))
    return out


def _same_root(a: str, b: str, driver: DriverKind) -> bool:
    try:
        return parse_cgroup_root(a, driver) == parse_cgroup_root(b, driver)
    except NameError_:
        return a.strip() == b.strip()


def cri_socket_path(endpoint: str) -> str | None:
    """The socket path of a CRI endpoint ("unix:///run/containerd/containerd.sock" or a bare path);
    None for endpoints that are not unix sockets."""
    if endpoint.startswith("unix://"):
        return endpoint.removeprefix("unix://")
    if "://" in endpoint:
        return None
    return endpoint


def cri_check(endpoint: str | None, file_type: str | None) -> Check:
    """`file_type` is what is at the socket path: "socket", "missing", or another kind of file."""
    name = "CRI socket"
    if endpoint is None:
        return Check(name, Verdict.WARN, "no --cri-endpoint given: container cgroups are not resized")
    path = cri_socket_path(endpoint)
    if path is None:
        return Check(name, Verdict.WARN, f"{endpoint} is not a unix socket endpoint; not checked")
    if file_type == "socket":
        return Check(name, Verdict.OK, f"{path} is a socket")
    if file_type == "missing":
        return Check(name, Verdict.FAIL, f"{path} does not exist (is the container runtime running?)")
    return Check(name, Verdict.FAIL, f"{path} is a {file_type}, not a socket")


def root_dir_checks(dirs: Iterable[tuple[str, bool, bool]]) -> list[Check]:
    """(relative dir, exists, writable) of each kubepods directory the agent writes below."""
    out: list[Check] = []
    for reldir, exists, writable in dirs:
        name = f"cgroup dir {reldir}"
        if not exists:
            out.append(Check(name, Verdict.WARN, "does not exist yet (the kubelet creates it)"))
        elif not writable:
            out.append(Check(name, Verdict.FAIL, "exists but is not writable by this process (run as root)"))
        else:
            out.append(Check(name, Verdict.OK, "exists and is writable"))
    return out


def kubepods_dirs(hierarchy: Hierarchy, root: str, driver: DriverKind) -> list[str]:
    """The kubepods directory in each hierarchy the agent writes to, relative to --cgroupfs."""
    try:
        node = parse_cgroup_root(root, driver).child("kubepods")
    except NameError_:
        return []
    out: list[str] = []
    for controller in WRITTEN_CONTROLLERS:
        loc = controller_location(hierarchy, controller)
        if loc is not None:
            mount = "" if loc[1] == "." else loc[1]
            d = "/".join(p for p in (mount, cgroup_dir(node, driver)) if p)
            if d not in out:
                out.append(d)
    return out


# ----- the shell


def _file_type(path: str) -> str:
    try:
        mode = Path(path).stat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"path that cannot be inspected ({err.strerror})"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "directory" if stat.S_ISDIR(mode) else "regular file" if stat.S_ISREG(mode) else "special file"


def _has_kubepods(reader: TreeReader, hierarchy: Hierarchy, root: str) -> dict[DriverKind, bool]:
    out: dict[DriverKind, bool] = {}
    for driver in (DriverKind.CGROUPFS, DriverKind.SYSTEMD):
        try:
            dirs = kubepods_dirs(hierarchy, root, driver)
            out[driver] = any(reader.exists(d) for d in dirs)
        except CgroupError:
            out[driver] = False
    return out


def probe(
    cgroupfs: Path,
    *,
    version: str = "auto",
    mountinfo: Path = MOUNTINFO,
    hugepages_dir: Path = HUGEPAGES_DIR,
    kubelet_config: Path | None = None,
    cri_endpoint: str | None = None,
    cgroup_root: str | None = None,
    cgroup_driver: DriverKind | None = None,
) -> list[Check]:
    """Gather the facts and judge them. `cgroup_root` / `cgroup_driver` are the agent's own settings
    (compared with the kubelet's when given). Without `kubelet_config` the kubelet's default config path
    is used if it exists; when there is none, the driver is inferred from the tree."""
    checks: list[Check] = []
    sizes = node_hugepage_sizes(hugepages_dir)
    try:
        hierarchy: Hierarchy | None = detect_hierarchy(cgroupfs, mountinfo, version)
    except (HierarchyNotFound, CgroupError, ValueError) as err:
        hierarchy = None
        checks.append(Check("cgroup hierarchy", Verdict.FAIL, str(err)))
    if hierarchy is not None:
        checks.append(mode_check(hierarchy))
        checks.extend(controller_checks(hierarchy, sizes))
    checks.append(hugepage_check(sizes))

    kubelet: KubeletCgroups | None = None
    problem: str | None = None
    if kubelet_config is None and KUBELET_CONFIG.is_file():
        kubelet_config = KUBELET_CONFIG
    if kubelet_config is not None:
        try:
            kubelet = parse_kubelet_config(kubelet_config.read_text(encoding="utf-8"), str(kubelet_config))
        except FileNotFoundError:
            problem = f"no kubelet config at {kubelet_config}"
        except (OSError, UnicodeError, ValueError) as err:
            problem = f"cannot use {kubelet_config}: {err}"
    root = cgroup_root or (kubelet.root if kubelet is not None else "/")
    if hierarchy is not None:
        reader = TreeReader(cgroupfs)
        has = _has_kubepods(reader, hierarchy, root)
        checks.extend(driver_checks(kubelet, problem, has, cgroup_driver, cgroup_root))
        driver = cgroup_driver or (kubelet.driver if kubelet else infer_driver(has)) or KUBELET_DEFAULT_DRIVER
        facts = []
        for d in kubepods_dirs(hierarchy, root, driver):
            try:
                exists = reader.exists(d)
            except CgroupError:
                exists = False  # a symlink where the cgroup should be: not usable
            facts.append((d, exists, exists and os.access(cgroupfs / d, os.W_OK)))
        checks.extend(root_dir_checks(facts))
    socket_path = cri_socket_path(cri_endpoint) if cri_endpoint else None
    checks.append(cri_check(cri_endpoint, _file_type(socket_path) if socket_path else None))
    return checks
