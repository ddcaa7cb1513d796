"""One frozen settings object, built from a YAML config file and then command-line flags.

The keys and their parsers are `agent.config.keys` and `agent.config.values`; here, the settings
themselves and building them: every problem found, of a single value or of values together, is reported,
one clear line each, in a single `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from agent.config.keys import KEYS, PATH_KEYS
from agent.core.compute import ComputeConfig
from agent.core.model import CPUWeightFormula, Resources
from agent.infra.configsection import doc
from agent.infra.errors import PermanentError
from agent.recommender.config import RecommenderSettings
from agent.rollout.config import RolloutSettings
from agent.vpa.config import VPASettings
from cgroupfs.naming import parse_cgroup_root
from cgroupfs.types import CgroupName, DriverKind, NameError_

DEFAULT_STATE_DIR: Final = Path("/var/lib/kube-cgroup-agent")


class ConfigError(PermanentError, ValueError):
    """Every problem of a configuration, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems), problems=problems)
        self.problems = problems

    def user_message(self) -> str:
        return "invalid configuration: " + "; ".join(self.problems)


@dataclass(frozen=True, slots=True)
class Settings:
    """The agent's settings: the config file's keys and the command line's flags."""

    cgroupfs: Path = field(default=Path("/sys/fs/cgroup"), metadata=doc(
        "where the cgroup filesystem is mounted (`/host/sys/fs/cgroup` in the DaemonSet)"))
    cgroup_root: str = field(default="/", metadata=doc("the kubelet's `--cgroup-root`; the QoS tree lives below it"))
    cgroup_driver: DriverKind = field(default=DriverKind.CGROUPFS, metadata=doc("the kubelet's cgroup driver"))
    cgroup_version: str = field(default="auto", metadata=doc(
        "`auto` reads `/proc/self/mountinfo` (or the layout of a plain directory)", kind="`auto`, `1` or `2`"))
    pods: str | None = field(default=None, metadata=doc(
        "a file or directory of Pod manifests, or `-` (stdin), instead of the API (a bare node)",
        default="unset: the node's pods from the API"))
    kubeconfig: str | None = field(default=None, metadata=doc(
        "the kubeconfig to reach the API server with", default="unset: in-cluster, else `$KUBECONFIG` or `~/.kube/config`"))
    node_name: str | None = field(default=None, metadata=doc("this node's name", default="unset: `$NODE_NAME`"))
    cri_endpoint: str | None = field(default=None, metadata=doc(
        "the runtime's CRI socket, `unix:///run/containerd/containerd.sock` or an absolute path",
        default="unset: the first of containerd's, CRI-O's and cri-dockerd's sockets that exists"))
    allocatable: Resources | None = field(default=None, metadata=doc(
        "what `kubepods` is sized with, e.g. `{cpu: 3900m, memory: 15872Mi, hugepages-2Mi: 256Mi}`: capacity − "
        "kube-reserved − system-reserved, not subtracting the eviction threshold (the kubelet does not either)",
        default="unset: from the Node (the daemon), else `kubepods` is left alone", kind="resource map"))
    qos_reserved_memory_percent: int | None = field(default=None, metadata=doc(
        "the kubelet's QOSReserved, e.g. `{memory: 50%}`", default="unset", kind="`{memory: N%}`"))
    cpu_manager_policy: str = field(default="none", metadata=doc(
        "the kubelet's; `static` makes non-integral CPU resizes of Guaranteed pods infeasible",
        kind="`none` or `static`"))
    cpu_cfs_quota: bool = field(default=True, metadata=doc("enforce CPU limits (`false`: quota -1), as the kubelet's"))
    cpu_cfs_quota_period_us: int = field(default=100_000, metadata=doc("the CFS period, as the kubelet's"))
    cpu_weight_formula: CPUWeightFormula = field(default=CPUWeightFormula.LINEAR, metadata=doc(
        "cgroup v2 pod and QoS `cpu.weight` from shares: `linear` (the kubelet's) or `quadratic` (runc ≥ 1.3.2)"))
    container_cpu_weight_formula: CPUWeightFormula = field(default=CPUWeightFormula.QUADRATIC, metadata=doc(
        "what the runtime uses for container `cpu.weight` on v2"))
    hugepage_sizes: tuple[int, ...] | None = field(default=None, metadata=doc(
        "the huge page sizes managed, e.g. `[2Mi, 1Gi]`", default="the node's", kind="list of sizes"))
    pod_memory_reservation: bool = field(default=True, metadata=doc(
        "a pod-level memory request becomes the pod's soft limit (v1) / `memory.low` (v2)"))
    create_qos_cgroups: bool = field(default=False, metadata=doc(
        "create missing tier cgroups (bare nodes only; the kubelet creates them otherwise)"))
    state_dir: Path = field(default=DEFAULT_STATE_DIR, metadata=doc("the checkpoint and node-local state"))
    resync_period_s: float = field(default=60.0, metadata=doc(
        "how often the daemon looks at the whole node again (its cgroup files, not the API): missed events and "
        "drift are caught there"))
    metrics_bind_address: str = field(default="127.0.0.1:9812", metadata=doc("where `/metrics` is served, host:port"))
    health_bind_address: str = field(default="127.0.0.1:9813", metadata=doc(
        "where `/healthz` and `/readyz` are served, host:port"))
    observe_only: bool = field(default=False, metadata=doc(
        "every managed thing `observe`: drift is reported, nothing is written"))
    ownership: Mapping[str, str] = field(default_factory=dict, metadata=doc(
        "who owns each managed thing (`qosTiers`, `qosReservedMemory`, `podCgroups`, `podLevelLimits`, "
        "`containerResizes`): `auto`, `agent`, `kubelet` or `observe` (docs/ownership.md)",
        default="every thing `auto`", kind="map: thing → owner"))
    memory_reclaim_step_down: bool = field(default=False, metadata=doc(
        "a memory limit decrease held back by the container's usage is stepped down toward usage on each pass, "
        "instead of left where it is until usage allows the whole decrease"))
    # The daemon (`run`): how the kubepods size is derived when `allocatable` is not given, what `auto`
    # ownership decides from, how drift is handled, and how it logs.
    kube_reserved: Resources | None = field(default=None, metadata=doc(
        "the kubelet's: without `allocatable`, `kubepods` is the Node's capacity minus this and `systemReserved`",
        default="unset", kind="resource map"))
    system_reserved: Resources | None = field(default=None, metadata=doc(
        "the kubelet's (see `kubeReserved`)", default="unset", kind="resource map"))
    eviction_hard_memory: str = field(default="100Mi", metadata=doc(
        "the kubelet's; only `memory.available` is read: without `allocatable` or the reserved values, "
        "`kubepods` is the Node's allocatable plus this", default="`{memory.available: 100Mi}`", kind="map"))
    feature_gates: Mapping[str, bool] = field(default_factory=dict, metadata=doc(
        "the kubelet's feature gates, which `auto` ownership decides from (the agent cannot read the kubelet's)",
        kind="map: gate → boolean"))
    kubelet_version: str | None = field(default=None, metadata=doc(
        "the kubelet's version for `auto` ownership, e.g. `v1.33.2`",
        default="unset: the Node's `status.nodeInfo.kubeletVersion` (none: a bare node)"))
    drift_max_reverts: int = field(default=3, metadata=doc(
        "reverts of a value after which the agent stops writing it (`drift.yielded`)"))
    drift_backoff_s: float = field(default=10.0, metadata=doc(
        "the first wait before a value changed back is written again (exponential backoff)"))
    workers: int = field(default=2, metadata=doc("pods reconciled at once"))
    # the client-side limit of the daemon's requests to the API server (client-go's QPS and Burst)
    api_qps: float = field(default=20.0, metadata=doc(
        "the client-side limit of the daemon's API requests a second (client-go's QPS)"))
    api_burst: int = field(default=40, metadata=doc("the requests allowed at once above `apiQPS` (client-go's Burst)"))
    pods_poll_interval_s: float = field(default=2.0, metadata=doc(
        "how often a `pods:` directory is looked at for edits (by mtime)"))
    reconciler: str = field(default="auto", metadata=doc(  # see agent.daemon.select_reconciler
        "deprecated and ignored (one reconciler runs on every node): it will be refused in the next release"))
    log_format: str = field(default="auto", metadata=doc(
        "how log lines are written: `auto` is `journal` (structured entries) under a systemd unit, a console "
        "format on a terminal, else JSON lines"))
    log_level: str = field(default="info", metadata=doc("the lowest level logged"))
    # The kubelet's own settings file (KubeletConfiguration): the kubelet's knobs default from it
    # (agent.config.kubelet); `explicit` names the config keys set in the agent's config or flags, which win.
    kubelet_config: Path | None = field(default=None, metadata=doc(
        "the kubelet's `KubeletConfiguration` file (`--kubelet-config`): the kubelet's knobs default from it",
        default="unset"))
    cgroups_per_qos: bool = field(default=True, metadata=doc(
        "the kubelet's; `false` is refused: without QoS tiers the agent has nothing to own"))
    enforce_node_allocatable: tuple[str, ...] = field(default=("pods",), metadata=doc(
        "the kubelet's; without `pods` the kubelet sizes `kubepods` with the node's capacity, and so does the agent",
        kind="list"))
    kubepods_size: Resources | None = None  # set by the daemon from the Node's capacity when not enforcing pods
    explicit: frozenset[str] = frozenset()
    recommender: RecommenderSettings = field(default_factory=RecommenderSettings, metadata=doc(
        "the local recommender (docs/recommender.md)", kind="section"))
    vpa: VPASettings = field(default_factory=VPASettings, metadata=doc("VPA in place (docs/vpa.md)", kind="section"))
    rollout: RolloutSettings = field(default_factory=RolloutSettings, metadata=doc(
        "graceful in-place updates (docs/rollouts.md)", kind="section"))
    annotation_namespaces: frozenset[str] | None = field(default=None, metadata=doc(
        "where the resize and pod-level annotations are honoured, e.g. `[batch, ci]` (`[\"*\"]`: all; `[]`: "
        "none, and no LimitRange watch but for VPA's pod-level pods); elsewhere a pod carrying one is an error naming the setting; where "
        "honoured, within the namespace's LimitRanges (docs/annotations.md; SECURITY.md)",
        default="every namespace (`[]` in `deploy/`; unset, the daemon logs `annotations.every_namespace`)",
        kind="list of namespaces"))
    inherited: Mapping[str, str] = field(default_factory=dict)  # config key -> the kubelet config it came from
    # explicit settings that disagree with the kubelet's, one line each
    kubelet_conflicts: tuple[str, ...] = ()

    @property
    def cgroup_root_name(self) -> CgroupName:
        return parse_cgroup_root(self.cgroup_root, self.cgroup_driver)

    def compute_config(self, hugepage_sizes: tuple[int, ...]) -> ComputeConfig:
        return ComputeConfig(
            cgroup_root=self.cgroup_root_name,
            cpu_cfs_quota=self.cpu_cfs_quota,
            cpu_cfs_quota_period_us=self.cpu_cfs_quota_period_us,
            hugepage_sizes=hugepage_sizes,
            allocatable=self.allocatable,
            qos_reserved_memory_percent=self.qos_reserved_memory_percent,
            pod_memory_reservation=self.pod_memory_reservation,
            kubepods_size=self.kubepods_size,
        )


def from_mapping(
    raw: Mapping[str, Any], base: Settings | None = None, relative_to: Path | None = None
) -> Settings:
    """Apply config keys over `base`. Relative paths in a config file are relative to that file."""
    problems: list[str] = []
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("apiVersion", "kind"):
            continue
        spec = KEYS.get(key)
        if spec is None:
            problems.append(f"unknown setting {key!r}")
            continue
        name, convert = spec
        if value is None:
            continue
        if key in PATH_KEYS and relative_to is not None and isinstance(value, str) and value not in ("-",):
            p = Path(value)
            value = str(p if p.is_absolute() else relative_to / p)
        try:
            changes[name] = convert(value)
        except (ValueError, TypeError) as err:  # a value of the wrong shape is the user's error too
            problems.append(f"{key}: {err}")
    base = base or Settings()
    explicit = base.explicit | {k for k, v in raw.items() if k in KEYS and v is not None}
    settings = replace(base, **changes, explicit=frozenset(explicit))
    problems.extend(validate(settings))
    if problems:
        raise ConfigError(problems)
    return settings


def validate(s: Settings) -> list[str]:
    problems: list[str] = []
    try:
        s.cgroup_root_name  # noqa: B018 - validates the root
    except NameError_ as err:
        problems.append(f"cgroupRoot {s.cgroup_root!r}: {err}")
    if not s.cgroups_per_qos:
        problems.append(
            "cgroupsPerQOS is false: the kubelet makes no QoS hierarchy (kubepods, burstable, besteffort) "
            "and the agent has nothing to own"
        )
    if s.resync_period_s <= 0:
        problems.append("resyncPeriod must be positive")
    if s.api_qps <= 0:
        problems.append("apiQPS must be positive")
    if s.drift_backoff_s <= 0:
        problems.append("driftBackoff must be positive")
    if s.pods_poll_interval_s <= 0:
        problems.append("podsPollInterval must be positive")
    if s.metrics_bind_address == s.health_bind_address and not s.metrics_bind_address.endswith(":0"):
        problems.append(f"metricsBindAddress and healthBindAddress are both {s.metrics_bind_address}")
    if s.cri_endpoint is not None and not (
        s.cri_endpoint.startswith("unix://") or s.cri_endpoint.startswith("/")
    ):
        problems.append(f"criEndpoint {s.cri_endpoint!r} must be unix:///path or an absolute socket path")
    return problems


def load_file(path: Path, base: Settings | None = None) -> Settings:
    import yaml

    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError([f"cannot read config {path}: {err.strerror}"]) from err
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise ConfigError([f"config {path} is not valid YAML: {err}"]) from err
    if not isinstance(raw, Mapping):
        raise ConfigError([f"config {path} must be a map of settings"])
    return from_mapping(raw, base, relative_to=path.parent)
