"""One frozen settings object, built from a YAML config file and then command-line flags.

Names follow the kubelet's configuration where the kubelet has the same knob (`cgroupRoot`,
`cgroupDriver`, `qosReserved`, `cpuManagerPolicy`, `cpuCFSQuota`, `cpuCFSQuotaPeriod`...). Every
problem found is reported, one clear line each, in a single `ConfigError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

from agent.core.compute import ComputeConfig
from agent.core.model import CPUWeightFormula, Resources
from agent.infra.durations import parse_duration_us
from agent.infra.errors import PermanentError
from agent.recommender.config import RecommenderSettings, parse_recommender
from agent.rollout.config import RolloutSettings, parse_rollout_settings
from agent.vpa.config import VPASettings, parse_vpa_settings
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


def parse_percent(text: str) -> int:
    m = re.fullmatch(r"(\d{1,3})%", text.strip())
    if not m or int(m.group(1)) > 100:
        raise ValueError(f"{text!r} is not a percentage between 0% and 100%")
    return int(m.group(1))


def parse_qos_reserved(value: object) -> int | None:
    """`memory=50%` (flag) or `{memory: 50%}` (config); only memory is supported, as in the kubelet."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        pairs = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
        if not pairs and value:
            raise ValueError(f"qosReserved {value!r} must look like memory=50%")
        value = pairs
    if not isinstance(value, Mapping):
        raise ValueError("qosReserved must be a map like {memory: 50%}")
    unknown = set(value) - {"memory"}
    if unknown:
        raise ValueError(f"qosReserved supports only memory, not {', '.join(sorted(map(repr, map(str, unknown))))}")
    return parse_percent(str(value["memory"])) if "memory" in value else None


def parse_allocatable(value: object) -> Resources:
    """`cpu=8,memory=32Gi,hugepages-2Mi=1Gi` (flag) or a map (config)."""
    from agent.pods.parse import resource_list

    if isinstance(value, str):
        value = dict(p.split("=", 1) for p in value.split(",") if p)
    if not isinstance(value, Mapping):
        raise ValueError("allocatable must be a map or cpu=..,memory=..")
    return resource_list(value, "allocatable")


def parse_hugepage_sizes(value: object) -> tuple[int, ...]:
    from agent.pods import quantity

    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, list):
        raise ValueError("hugepageSizes must be a list like [2Mi, 1Gi]")
    return tuple(sorted(quantity.to_int(v, "hugepageSizes") for v in value))


# config key -> (settings field, converter)
def _bool(v: object) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"{v!r} is not true or false")


def _str(v: object) -> str:
    if not isinstance(v, str | int) or isinstance(v, bool):
        raise ValueError(f"{v!r} is not a string")
    return str(v)


def _formula(v: object) -> CPUWeightFormula:
    try:
        return CPUWeightFormula(str(v))
    except ValueError:
        raise ValueError(f"{v!r} is not linear or quadratic") from None


def _driver(v: object) -> DriverKind:
    try:
        return DriverKind(str(v))
    except ValueError:
        raise ValueError(f"{v!r} is not cgroupfs or systemd") from None


def _version(v: object) -> str:
    if str(v) not in ("auto", "1", "2"):
        raise ValueError(f"{v!r} is not auto, 1 or 2")
    return str(v)


def _policy(v: object) -> str:
    if str(v) not in ("none", "static"):
        raise ValueError(f"{v!r} is not none or static")
    return str(v)


def _period(v: object) -> int:
    us = parse_duration_us(str(v))
    if not 1000 <= us <= 1_000_000:
        raise ValueError(f"{v!r} must be between 1ms and 1s")
    return us


def _seconds(v: object) -> float:
    """A duration ("60s", "200ms") or a number of seconds."""
    if isinstance(v, str):
        return parse_duration_us(v) / 1_000_000
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{v!r} is not a duration like 60s")
    return float(v)


def _ownership(v: object) -> Mapping[str, str]:
    if not isinstance(v, Mapping):
        raise ValueError("ownership must be a map")
    allowed_keys = {"qosReservedMemory", "podLevelLimits", "containerResizes", "qosTiers", "podCgroups"}
    allowed_values = {"auto", "agent", "kubelet", "observe"}
    for k, val in v.items():
        if k not in allowed_keys:
            raise ValueError(f"ownership key {k!r} is unknown (known: {', '.join(sorted(allowed_keys))})")
        if val not in allowed_values:
            raise ValueError(f"ownership {k}: {val!r} is not one of {', '.join(sorted(allowed_values))}")
    return {str(k): str(val) for k, val in v.items()}


def _bind_address(v: object) -> str:
    """host:port; the daemon binds only there (127.0.0.1 unless configured)."""
    text = _str(v)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not host:port, e.g. 127.0.0.1:9812")
    return text


def _feature_gates(v: object) -> Mapping[str, bool]:
    if not isinstance(v, Mapping):
        raise ValueError("featureGates must be a map of gate name to true/false")
    return {str(k): _bool(val) for k, val in v.items()}


def _eviction_hard(v: object) -> str:
    """evictionHard as the kubelet writes it ({memory.available: 100Mi}); only memory matters here."""
    if not isinstance(v, Mapping):
        raise ValueError("evictionHard must be a map like {memory.available: 100Mi}")
    value = v.get("memory.available", "100Mi")
    text = _str(value)
    if text.endswith("%"):
        parse_percent(text)
    else:
        from agent.pods import quantity

        quantity.to_int(text, "evictionHard memory.available")
    return text


def _positive_int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{v!r} is not a positive integer")
    return v


def _kubelet_version(v: object) -> str:
    text = _str(v)
    if not re.fullmatch(r"v?\d+\.\d+(\.\d+)?([-+].*)?", text):
        raise ValueError(f"{text!r} is not a version like v1.33.2")
    return text


def _enforce(v: object) -> tuple[str, ...]:
    """enforceNodeAllocatable as the kubelet takes it: a list of pods, system-reserved, kube-reserved, none."""
    allowed = {
        "pods",
        "system-reserved",
        "kube-reserved",
        "system-reserved-compressible",
        "kube-reserved-compressible",
        "none",
    }
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError("enforceNodeAllocatable must be a list like [pods]")
    unknown = sorted(set(v) - allowed)
    if unknown:
        raise ValueError(f"enforceNodeAllocatable: unknown {', '.join(unknown)}")
    return tuple(x for x in v if x != "none")


def _namespaces(v: object) -> frozenset[str] | None:
    """A list of namespace names; ["*"] means every namespace, [] none."""
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ValueError("annotationNamespaces must be a list of namespace names (or [\"*\"])")
    return None if "*" in v else frozenset(v)


def _choice(*allowed: str) -> Any:
    def convert(v: object) -> str:
        if str(v) not in allowed:
            raise ValueError(f"{v!r} is not one of {', '.join(allowed)}")
        return str(v)

    return convert


_KEYS: Final[dict[str, tuple[str, Any]]] = {
    "cgroupfs": ("cgroupfs", lambda v: Path(_str(v))),
    "cgroupRoot": ("cgroup_root", _str),
    "cgroupDriver": ("cgroup_driver", _driver),
    "cgroupVersion": ("cgroup_version", _version),
    "pods": ("pods", _str),
    "kubeconfig": ("kubeconfig", _str),
    "nodeName": ("node_name", _str),
    "criEndpoint": ("cri_endpoint", _str),
    "allocatable": ("allocatable", parse_allocatable),
    "qosReserved": ("qos_reserved_memory_percent", parse_qos_reserved),
    "cpuManagerPolicy": ("cpu_manager_policy", _policy),
    "cpuCFSQuota": ("cpu_cfs_quota", _bool),
    "cpuCFSQuotaPeriod": ("cpu_cfs_quota_period_us", _period),
    "cpuWeightFormula": ("cpu_weight_formula", _formula),
    "containerCpuWeightFormula": ("container_cpu_weight_formula", _formula),
    "hugepageSizes": ("hugepage_sizes", parse_hugepage_sizes),
    "podMemoryReservation": ("pod_memory_reservation", _bool),
    "createQOSCgroups": ("create_qos_cgroups", _bool),
    "stateDir": ("state_dir", lambda v: Path(_str(v))),
    "resyncPeriod": ("resync_period_s", _seconds),
    "metricsBindAddress": ("metrics_bind_address", _bind_address),
    "healthBindAddress": ("health_bind_address", _bind_address),
    "observeOnly": ("observe_only", _bool),
    "ownership": ("ownership", _ownership),
    "memoryReclaimStepDown": ("memory_reclaim_step_down", _bool),
    "kubeReserved": ("kube_reserved", parse_allocatable),
    "systemReserved": ("system_reserved", parse_allocatable),
    "evictionHard": ("eviction_hard_memory", _eviction_hard),
    "featureGates": ("feature_gates", _feature_gates),
    "kubeletVersion": ("kubelet_version", _kubelet_version),
    "driftMaxReverts": ("drift_max_reverts", _positive_int),
    "driftBackoff": ("drift_backoff_s", _seconds),
    "workers": ("workers", _positive_int),
    "podsPollInterval": ("pods_poll_interval_s", _seconds),
    "reconciler": ("reconciler", _choice("auto", "engine", "pipeline")),
    "logFormat": ("log_format", _choice("auto", "json", "console")),
    "logLevel": ("log_level", _choice("debug", "info", "warning", "error")),
    "kubeletConfig": ("kubelet_config", lambda v: Path(_str(v))),
    "cgroupsPerQOS": ("cgroups_per_qos", _bool),
    "enforceNodeAllocatable": ("enforce_node_allocatable", _enforce),
    "recommender": ("recommender", parse_recommender),
    "vpa": ("vpa", parse_vpa_settings),
    "rollout": ("rollout", parse_rollout_settings),
    "annotationNamespaces": ("annotation_namespaces", lambda v: _namespaces(v)),
}
_PATH_KEYS: Final = {"cgroupfs", "pods", "stateDir", "kubeconfig", "kubeletConfig"}
KUBELET_KEYS: Final = (
    "cgroupDriver",
    "cgroupRoot",
    "cgroupsPerQOS",
    "qosReserved",
    "kubeReserved",
    "systemReserved",
    "enforceNodeAllocatable",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "cpuManagerPolicy",
    "featureGates",
    "evictionHard",
)
"""The KubeletConfiguration fields the agent takes from the kubelet's file: same names as the agent's keys."""


def convert_key(key: str, value: object) -> tuple[str, Any]:
    """(settings field, converted value) of one config key; ValueError names the problem."""
    name, convert = _KEYS[key]
    return name, convert(value)


def from_mapping(
    raw: Mapping[str, Any], base: Settings | None = None, relative_to: Path | None = None
) -> Settings:
    """Apply config keys over `base`. Relative paths in a config file are relative to that file."""
    problems: list[str] = []
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("apiVersion", "kind"):
            continue
        spec = _KEYS.get(key)
        if spec is None:
            problems.append(f"unknown setting {key!r}")
            continue
        name, convert = spec
        if value is None:
            continue
        if key in _PATH_KEYS and relative_to is not None and isinstance(value, str) and value not in ("-",):
            p = Path(value)
            value = str(p if p.is_absolute() else relative_to / p)
        try:
            changes[name] = convert(value)
        except (ValueError, TypeError) as err:  # a value of the wrong shape is the user's error too
            problems.append(f"{key}: {err}")
    base = base or Settings()
    explicit = base.explicit | {k for k, v in raw.items() if k in _KEYS and v is not None}
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


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Settings))
