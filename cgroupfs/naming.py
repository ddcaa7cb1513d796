"""cgroupfs and systemd naming, as the kubelet and runc do it (pure).

cgroupfs: ("kubepods", "burstable", "pod1234-ab") -> "kubepods/burstable/pod1234-ab".
systemd: each component's "-" becomes "_", components are joined with "-" and ".slice" appended,
then the slice is expanded into its ancestry:
"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice".
"""

from __future__ import annotations

from cgroupfs.types import CgroupName, DriverKind, NameError_

SLICE_SUFFIX = ".slice"


def to_cgroupfs(name: CgroupName) -> str:
    """The directory below a hierarchy's mount point, without a leading "/" ("" for the root)."""
    return "/".join(name.parts)


def to_systemd_unit(name: CgroupName) -> str:
    """The slice unit name ("-.slice" for the root)."""
    if not name.parts:
        return "-.slice"
    return "-".join(p.replace("-", "_") for p in name.parts) + SLICE_SUFFIX


def expand_slice(slice_name: str) -> str:
    """runc's ExpandSlice: "a-b-c.slice" -> "a.slice/a-b.slice/a-b-c.slice" (no leading "/")."""
    if not slice_name.endswith(SLICE_SUFFIX) or "/" in slice_name:
        raise NameError_(f"invalid slice name {slice_name!r}")
    if slice_name == "-.slice":
        return ""
    stem = slice_name[: -len(SLICE_SUFFIX)]
    if not stem or "--" in stem or stem.startswith("-") or stem.endswith("-"):
        raise NameError_(f"invalid slice name {slice_name!r}")
    out: list[str] = []
    prefix = ""
    for component in stem.split("-"):
        prefix = f"{prefix}-{component}" if prefix else component
        out.append(prefix + SLICE_SUFFIX)
    return "/".join(out)


def to_systemd(name: CgroupName) -> str:
    """The directory of a slice below the cgroup mount, without a leading "/"."""
    return expand_slice(to_systemd_unit(name))


def parse_systemd(path: str) -> CgroupName:
    """ParseSystemdToCgroupName: the basename's components, "_" back to "-"."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    if base in ("", "-.slice"):
        return CgroupName(())
    if not base.endswith(SLICE_SUFFIX):
        raise NameError_(f"{path!r} is not a slice")
    stem = base[: -len(SLICE_SUFFIX)]
    return CgroupName(tuple(p.replace("_", "-") for p in stem.split("-")))


def parse_cgroupfs(path: str) -> CgroupName:
    return CgroupName(tuple(p for p in path.strip("/").split("/") if p))


def cgroup_dir(name: CgroupName, driver: DriverKind) -> str:
    """The cgroup's directory below a hierarchy's mount point, per driver."""
    return to_systemd(name) if driver is DriverKind.SYSTEMD else to_cgroupfs(name)


def parse_cgroup_root(text: str, driver: DriverKind) -> CgroupName:
    """The kubelet's --cgroup-root: "/" or "/a/b" (cgroupfs), or "/" or "a.slice" style (systemd)."""
    text = text.strip()
    if driver is DriverKind.SYSTEMD and text.endswith(SLICE_SUFFIX):
        return parse_systemd(text)
    return parse_cgroupfs(text)


def container_dir(pod_dir: str, container_id: str, driver: DriverKind, runtime: str = "containerd") -> str:
    """Where a container's cgroup lives, per runtime and driver.

    containerd: "<pod>/<id>" (cgroupfs) or "<pod>/cri-containerd-<id>.scope" (systemd);
    CRI-O: "<pod>/crio-<id>" (cgroupfs) or "<pod>/crio-<id>.scope" (systemd);
    docker (cri-dockerd): "<pod>/<id>" or "<pod>/docker-<id>.scope".
    """
    if driver is DriverKind.SYSTEMD:
        prefix = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}.get(
            runtime, "cri-containerd"
        )
        leaf = f"{prefix}-{container_id}.scope"
    else:
        leaf = f"crio-{container_id}" if runtime == "cri-o" else container_id
    return f"{pod_dir}/{leaf}" if pod_dir else leaf
