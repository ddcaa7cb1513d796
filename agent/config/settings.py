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

    cgroupfs: Path = Path("/sys/fs/cgroup")
    cgroup_root: str = "/"
    cgroup_driver: DriverKind = DriverKind.CGROUPFS
    cgroup_version: str = "auto"  # auto | 1 | 2
    pods: str | None = None  # file, directory or "-"; None = the Kubernetes API
    kubeconfig: str | None = None
    node_name: str | None = None
    cri_endpoint: str | None = None
    allocatable: Resources | None = None
    qos_reserved_memory_percent: int | None = None
    cpu_manager_policy: str = "none"
    cpu_cfs_quota: bool = True
    cpu_cfs_quota_period_us: int = 100_000
    cpu_weight_formula: CPUWeightFormula = CPUWeightFormula.LINEAR
    container_cpu_weight_formula: CPUWeightFormula = CPUWeightFormula.QUADRATIC
    hugepage_sizes: tuple[int, ...] | None = None  # None = read the node's
    pod_memory_reservation: bool = True
    create_qos_cgroups: bool = False
    state_dir: Path = DEFAULT_STATE_DIR
    resync_period_s: float = 60.0
    metrics_bind_address: str = "127.0.0.1:9812"
    health_bind_address: str = "127.0.0.1:9813"
    observe_only: bool = False
    ownership: Mapping[str, str] = field(default_factory=dict)
    memory_reclaim_step_down: bool = False  # seed 000: step a held-back memory limit down toward usage
    # The daemon (`run`): how the kubepods size is derived when `allocatable` is not given, what `auto`
    # ownership decides from, how drift is handled, and how it logs.
    kube_reserved: Resources | None = None
    system_reserved: Resources | None = None
    eviction_hard_memory: str = "100Mi"  # evictionHard memory.available, the kubelet's default
    feature_gates: Mapping[str, bool] = field(default_factory=dict)  # the kubelet's featureGates
    kubelet_version: str | None = None  # None = read from the Node object (or no kubelet, standalone)
    drift_max_reverts: int = 3
    drift_backoff_s: float = 10.0
    workers: int = 2
    # the client-side limit of the daemon's requests to the API server (client-go's QPS and Burst)
    api_qps: float = 20.0
    api_burst: int = 40
    pods_poll_interval_s: float = 2.0
    reconciler: str = "auto"  # auto | engine | pipeline (see agent.daemon.select_reconciler)
    log_format: str = "auto"  # auto | json | console
    log_level: str = "info"
    # The kubelet's own settings file (KubeletConfiguration): the kubelet's knobs default from it
    # (agent.config.kubelet); `explicit` names the config keys set in the agent's config or flags, which win.
    kubelet_config: Path | None = None
    cgroups_per_qos: bool = True
    enforce_node_allocatable: tuple[str, ...] = ("pods",)
    kubepods_size: Resources | None = (
        None  # set by the daemon from the Node's capacity when not enforcing pods
    )
    explicit: frozenset[str] = frozenset()
    recommender: RecommenderSettings = field(default_factory=RecommenderSettings)  # the local recommender
    vpa: VPASettings = field(default_factory=VPASettings)  # VPA in place (agent.vpa)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)  # graceful in-place updates (agent.rollout)
    # where the resize and pod-level annotations are honoured (None: every namespace; SECURITY.md)
    annotation_namespaces: frozenset[str] | None = None
    inherited: Mapping[str, str] = field(
        default_factory=dict
    )  # config key -> the kubelet config it came from
    kubelet_conflicts: tuple[
        str, ...
    ] = ()  # explicit settings that disagree with the kubelet's, one line each

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
