"""Desired kernel files for a node, and the pure diff against what was read back.

The flow is split so that only the shell reads: `desired_files` (pure) says which files matter,
the shell reads them (and the usage files a memory decrease needs), `diff` (pure) compares.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass

from agent.core.compute import NodeComputation
from agent.core.compute.pod import PodComputation
from agent.core.model import ContainerID, ContainerValues, PodUID, Problem
from cgroupfs import layout
from cgroupfs.convert import shares_to_weight_linear, shares_to_weight_quadratic
from cgroupfs.layout import FileSetting, Hierarchy, RenderOptions
from cgroupfs.naming import cgroup_dir, container_dir
from cgroupfs.types import CgroupValues, CgroupVersion, Controller, DriverKind


class Owner(enum.StrEnum):
    TIER = "tier"
    POD = "pod"
    CONTAINER = "container"


# CRI field names for container files (what the JSON contract reports).
_CONTAINER_FIELDS: Mapping[str, str] = {
    layout.CPU_SHARES: "cpu_shares",
    layout.CPU_QUOTA: "cpu_quota",
    layout.CPU_PERIOD: "cpu_period",
    layout.MEMORY_LIMIT: "memory_limit_in_bytes",
    layout.CPU_WEIGHT: "cpu_weight",
    layout.CPU_MAX: "cpu_max",
    layout.MEMORY_MAX: "memory_limit_in_bytes",
}


@dataclass(frozen=True, slots=True)
class DesiredFile:
    """A file the node's desired state occupies, and whose it is (a tier, a pod or a container)."""

    setting: FileSetting
    owner: Owner
    pod: str | None = None  # "ns/name"
    pod_uid: PodUID | None = None
    container: str | None = None
    container_id: ContainerID | None = None
    accept: tuple[str, ...] = ()  # other values that mean the same (see container_files, quota_accept)

    @property
    def field(self) -> str:
        return _CONTAINER_FIELDS.get(self.setting.filename, self.setting.filename)


@dataclass(frozen=True, slots=True)
class FileDiff:
    """A desired file against what was read back."""

    desired: DesiredFile
    current: str | None  # stripped read-back; None when the file or cgroup is missing
    differs: bool
    dir_exists: bool = True

    @property
    def setting(self) -> FileSetting:
        return self.desired.setting


@dataclass(frozen=True, slots=True)
class NodeDiff:
    """The node's files against the desired state, with the computation behind them."""

    files: tuple[FileDiff, ...]  # tiers, pods and containers, in tree order
    warnings: tuple[Problem, ...]
    errors: tuple[Problem, ...]
    computation: NodeComputation

    @property
    def changes(self) -> tuple[FileDiff, ...]:
        return tuple(f for f in self.files if f.differs)


@dataclass(frozen=True, slots=True)
class Observation:
    """What the shell read: file contents (None = missing) and which cgroup directories exist."""

    files: Mapping[str, str | None]
    dirs: Mapping[str, bool]


def _container_values(values: ContainerValues) -> CgroupValues:
    return CgroupValues(
        cpu_shares=values.cpu_shares,
        cpu_quota=values.cpu_quota,
        cpu_period=values.cpu_period,
        memory_limit=values.memory_limit,
    )


def quota_accept(
    settings: Iterable[FileSetting], values: CgroupValues, opts: RenderOptions
) -> Iterator[tuple[FileSetting, tuple[str, ...]]]:
    """Each setting with the other values its file may hold. Under the systemd driver a CPU limit file holds
    either systemd's rounded quota (the rendered value: what systemd keeps, and what the agent writes) or the
    exact one an older writer leaves there until systemd's next re-apply (runc < 1.3.2 for containers, a
    kubelet < 1.34 for pods: cgroupfs.systemd.grain); both are converged, so neither the change from one to
    the other at a daemon-reload nor the exact one is a difference to write back."""
    if opts.driver is not DriverKind.SYSTEMD or not (values.cpu_quota or values.cpu_period):
        for s in settings:
            yield s, ()
        return
    by_version: dict[CgroupVersion, Mapping[str, tuple[str, ...]]] = {}
    for s in settings:
        if s.controller is not Controller.CPU:
            yield s, ()
            continue
        forms = by_version.get(s.version)
        if forms is None:
            forms = by_version[s.version] = layout.systemd_accept(s.version, values)
        yield s, forms.get(s.filename, ())


def container_files(
    pod: PodComputation, hierarchy: Hierarchy, opts: RenderOptions, container_opts: RenderOptions
) -> tuple[DesiredFile, ...]:
    """Files of the running containers whose IDs the pod status gives (hugetlb is the runtime's)."""
    out: list[DesiredFile] = []
    pod_dir = cgroup_dir(pod.cgroup, opts.driver)
    key = pod.pod.key  # one string for all the pod's files (a node's rendered files are kept)
    for cc in pod.containers:
        status = pod.pod.status_of(cc.container.name)
        if status is None or status.container_id is None:
            continue
        sub = container_dir(pod_dir, status.container_id, opts.driver, status.runtime or "containerd")
        values = _container_values(cc.values)
        settings = layout.render(pod.cgroup, values, hierarchy, container_opts, subdir=sub)
        pairs = (quota_accept(settings, values, container_opts) if container_opts.driver is DriverKind.SYSTEMD
                 else ((s, ()) for s in settings))
        for s, accept in pairs:
            if s.filename == layout.CPU_WEIGHT:
                # The runtime, not the agent, turns a container's shares into cgroup v2 cpu.weight, with a
                # formula that depends on its version (runc < 1.3.2 linear, newer quadratic): either result
                # is converged.
                accept = (
                    str(shares_to_weight_linear(cc.values.cpu_shares)),
                    str(shares_to_weight_quadratic(cc.values.cpu_shares)),
                )
            out.append(
                DesiredFile(s, Owner.CONTAINER, key, pod.pod.uid, cc.container.name, status.container_id, accept)
            )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class WeightFormulaEvidence:
    """Which shares→weight formula the runtime used for the node's containers, read from their cpu.weight.

    Why read it: the kubelet writes pod and QoS weights with the linear formula, while the runtime converts a
    container's CRI cpu_shares itself — runc >= 1.3.2 and crun >= 1.23 quadratically, older ones linearly —
    and the CRI does not say which runc a runtime calls. The files do."""

    linear: int = 0  # containers whose weight only the linear formula gives
    quadratic: int = 0  # ... only the quadratic one
    either: int = 0  # both formulas give that weight for its shares (2, or 262144 and above)

    @property
    def formula(self) -> str:
        if self.linear and self.quadratic:
            return "mixed"
        if self.linear:
            return "linear"
        if self.quadratic:
            return "quadratic"
        return "unknown"

    def describe(self) -> str:
        seen = self.linear + self.quadratic
        if self.formula == "quadratic":
            return f"quadratic (runc >= 1.3.2 or crun >= 1.23), seen in {seen} container(s)"
        if self.formula == "linear":
            return f"linear (runc < 1.3.2, crun < 1.23, as the kubelet's pod weights), seen in {seen} container(s)"
        if self.formula == "mixed":
            return f"mixed: {self.linear} container(s) linear, {self.quadratic} quadratic (two runtimes or an upgrade)"
        return (f"unknown: no running container's weight tells the formulas apart ({self.either} where both agree)"
                if self.either else "unknown: no container cpu.weight read")


def container_weight_formula(files: Iterable[FileDiff]) -> WeightFormulaEvidence:
    """The evidence of every container cpu.weight read back (a value neither formula gives — a resize under
    way — is not evidence)."""
    linear = quadratic = either = 0
    for f in files:
        if f.desired.owner is not Owner.CONTAINER or f.setting.filename != layout.CPU_WEIGHT:
            continue
        if f.current is None or len(f.desired.accept) != 2:
            continue
        lin, quad = f.desired.accept
        if f.current == lin == quad:
            either += 1
        elif f.current == lin:
            linear += 1
        elif f.current == quad:
            quadratic += 1
    return WeightFormulaEvidence(linear, quadratic, either)


_QUOTA_WRITERS = {  # who writes a quota to each kind of cgroup, before and after opencontainers/cgroups v0.0.2
    Owner.POD: ("a kubelet < 1.34", "a kubelet >= 1.34"),
    Owner.CONTAINER: ("runc < 1.3.2", "runc >= 1.3.2"),
    Owner.TIER: ("an exact writer", "a rounded writer"),
}


@dataclass(frozen=True, slots=True)
class QuotaWriteEvidence:
    """How the CPU quotas that are not whole percents were left in their files under the systemd driver: the
    exact quota shows a writer before opencontainers/cgroups v0.0.2 and no systemd re-apply since; systemd's
    rounded one a newer writer, or a re-apply since (cgroupfs.systemd.grain)."""

    owner: Owner
    exact: int = 0
    rounded: int = 0

    def describe(self) -> str:
        old, new = _QUOTA_WRITERS[self.owner]
        if self.exact and self.rounded:
            return (f"both: {self.exact} exact (written by {old}, not re-applied by systemd since), "
                    f"{self.rounded} rounded")
        if self.exact:
            return f"exact ({old}), seen in {self.exact}; systemd writes the rounded one at its next re-apply"
        if self.rounded:
            return f"rounded ({new}, or re-applied by systemd since), seen in {self.rounded}"
        return "no quota that is not a whole percent read"


def quota_writes(files: Iterable[FileDiff]) -> dict[Owner, QuotaWriteEvidence]:
    """The evidence per kind of cgroup, from every CPU limit file with two accepted forms (a value that is
    neither — a resize under way — is not evidence)."""
    counts: dict[Owner, list[int]] = {}
    for f in files:
        d = f.desired
        if not d.accept or f.current is None or d.setting.filename not in (layout.CPU_MAX, layout.CPU_QUOTA):
            continue
        seen = counts.setdefault(d.owner, [0, 0])
        if _same(d.setting.filename, f.current, d.setting.value):
            seen[1] += 1
        elif _same(d.setting.filename, f.current, d.accept[-1]):
            seen[0] += 1
    return {owner: QuotaWriteEvidence(owner, exact, rounded) for owner, (exact, rounded) in counts.items()}


FilesCache = MutableMapping[PodUID, tuple[PodComputation, tuple[DesiredFile, ...]]]
"""Each pod's rendered files, by UID, with the computation they were rendered from (reused while that
very object is the pod's computation: a resync renders only the pods that changed)."""


def desired_files(
    comp: NodeComputation,
    hierarchy: Hierarchy,
    opts: RenderOptions,
    container_opts: RenderOptions | None = None,
    include_containers: bool = True,
    cache: FilesCache | None = None,
) -> tuple[DesiredFile, ...]:
    """Every file the node's desired state occupies: tiers, then each pod and its containers."""
    out: list[DesiredFile] = []
    systemd = opts.driver is DriverKind.SYSTEMD  # only there has a CPU limit two forms (quota_accept)
    for tier in comp.tiers:
        out.extend(
            DesiredFile(s, Owner.TIER, accept=accept)
            for s, accept in quota_accept(layout.render(tier.cgroup, tier.values, hierarchy, opts), tier.values, opts)
        )
    for pod in comp.pods:
        hit = cache.get(pod.pod.uid) if cache is not None else None
        if hit is not None and hit[0] is pod:
            out.extend(hit[1])
            continue
        key = pod.pod.key  # one string for all the pod's files (a node's rendered files are kept)
        settings = layout.render(pod.cgroup, pod.values, hierarchy, opts)
        files = (
            tuple(DesiredFile(s, Owner.POD, key, pod.pod.uid, accept=a) for s, a in quota_accept(settings, pod.values, opts))
            if systemd
            else tuple(DesiredFile(s, Owner.POD, key, pod.pod.uid) for s in settings)
        )
        if include_containers:
            files += container_files(pod, hierarchy, opts, container_opts or opts)
        if cache is not None:
            cache[pod.pod.uid] = (pod, files)
        out.extend(files)
    return tuple(out)


def paths_to_read(files: Iterable[DesiredFile]) -> tuple[str, ...]:
    """The file paths the shell must read to diff these files (reading them tells their directories too)."""
    return tuple(dict.fromkeys(f.setting.path for f in files))


def _same(filename: str, current: str, desired: str) -> bool:
    if current == desired:  # the common case of a converged node, without parsing
        return True
    try:
        return layout.canonical(filename, current) == layout.canonical(filename, desired)
    except ValueError:
        return False


def diff(comp: NodeComputation, files: Iterable[DesiredFile], observed: Observation) -> NodeDiff:
    """Compare desired files with the observation. A hugetlb file missing from an existing cgroup means
    the controller is not enabled there: it is reported once as a warning, not as a difference."""
    out: list[FileDiff] = []
    warnings = list(comp.warnings)
    hugetlb_missing: dict[str, None] = {}
    for f in files:
        s = f.setting
        current = observed.files.get(s.path)
        if current is not None:
            current = current.strip()
        if current is None and s.controller is Controller.HUGETLB and observed.dirs.get(s.directory, False):
            hugetlb_missing[s.directory] = None
            continue
        if current is None:
            differs = True
        elif current == s.value:  # a converged node's every file, without the general comparison
            differs = False
        else:
            differs = not any(_same(s.filename, current, v) for v in (s.value, *f.accept))
        out.append(FileDiff(f, current, differs, observed.dirs.get(s.directory, current is not None)))
    for d in hugetlb_missing:
        warnings.append(
            Problem(
                None, f"hugetlb is not enabled in {d} (no hugetlb files there): its limits are left alone"
            )
        )
    return NodeDiff(tuple(out), tuple(warnings), comp.errors, comp)


def not_yet_created(node: NodeDiff) -> tuple[NodeDiff, tuple[str, ...]]:
    """Drop pods whose cgroup the kubelet has not created yet, containers whose cgroup is gone or not there
    yet, and QoS tiers whose cgroup does not exist (yet): nothing to do for them now and no error either;
    they are reconciled when they appear. A missing cgroup holds nothing and limits nothing, so leaving its
    values out cannot expose a child above its parent, and every other pod's values are still written.
    Returns the reduced diff (with one warning per missing tier) and the keys of the waiting pods."""
    waiting = {
        f.desired.pod
        for f in node.files
        if f.desired.owner is Owner.POD and not f.dir_exists and f.desired.pod is not None
    }
    missing_tiers = sorted(
        {
            str(f.desired.setting.cgroup)
            for f in node.files
            if f.desired.owner is Owner.TIER and not f.dir_exists
        }
    )
    kept = tuple(
        f
        for f in node.files
        if f.desired.pod not in waiting and (f.desired.owner is Owner.POD or f.dir_exists)
    )
    warnings = (
        *node.warnings,
        *(
            Problem(
                None,
                f"QoS cgroup {name} does not exist yet (the kubelet creates it; createQOSCgroups on a "
                "bare node): its values are written once it appears",
            )
            for name in missing_tiers
        ),
    )
    return NodeDiff(kept, warnings, node.errors, node.computation), tuple(sorted(waiting))
