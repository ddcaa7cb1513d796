"""Where a container's cgroup lives, per runtime and cgroup driver.

Two ways to know: compute it from the pod's cgroup (the runtimes' naming rules, in
`cgroupfs.naming.container_dir`), or read it from the runtime (the OCI spec's `linux.cgroupsPath`
in a verbose ContainerStatus) and turn it into a directory as runc does.
"""

from __future__ import annotations

from typing import Final

from cgroupfs.naming import container_dir, expand_slice
from cgroupfs.types import DriverKind

# VersionResponse.runtime_name -> the runtime key cgroupfs.naming uses.
_RUNTIMES: Final = {"containerd": "containerd", "cri-o": "cri-o", "docker": "docker", "cri-dockerd": "docker"}


def runtime_kind(runtime_name: str) -> str:
    """The naming key for a runtime's self-reported name; unknown runtimes name cgroups as containerd."""
    return _RUNTIMES.get(runtime_name.strip().lower(), "containerd")


def container_cgroup_dir(pod_dir: str, container_id: str, driver: DriverKind, runtime_name: str) -> str:
    """The container's directory below a hierarchy's mount point (no leading "/")."""
    return container_dir(pod_dir.strip("/"), container_id, driver, runtime_kind(runtime_name))


def cgroups_path_to_dir(cgroups_path: str) -> str:
    """runc's reading of an OCI cgroupsPath, as a directory below the mount point (no leading "/").

    cgroupfs form: "/kubepods/burstable/pod<uid>/<id>". systemd form "<slice>:<prefix>:<name>":
    "kubepods-burstable-pod<uid_>.slice:cri-containerd:<id>" ->
    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope".
    """
    parts = cgroups_path.split(":")
    if len(parts) == 3:
        slice_name, prefix, name = parts
        parent = expand_slice(slice_name or "system.slice")  # runc's default parent
        unit = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
        return f"{parent}/{unit}" if parent else unit
    if len(parts) != 1:
        raise ValueError(f"invalid cgroupsPath {cgroups_path!r}")
    return cgroups_path.strip("/")
