"""The config file's vocabulary: which key sets which `Settings` field through which parser.

Names follow the kubelet's configuration where the kubelet has the same knob (`cgroupRoot`,
`cgroupDriver`, `qosReserved`, `cpuManagerPolicy`, `cpuCFSQuota`, `cpuCFSQuotaPeriod`...), so the keys the
kubelet's own file shares with the agent's (`KUBELET_KEYS`) are read from it with the same parsers.
Each feature parses its own section (`recommender:`, `vpa:`, `rollout:`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from agent.config.values import (
    choice,
    parse_allocatable,
    parse_bind_address,
    parse_bool,
    parse_cfs_period,
    parse_cgroup_version,
    parse_cpu_manager_policy,
    parse_driver,
    parse_enforce_node_allocatable,
    parse_eviction_hard,
    parse_feature_gates,
    parse_formula,
    parse_hugepage_sizes,
    parse_kubelet_version,
    parse_namespaces,
    parse_ownership,
    parse_positive_float,
    parse_positive_int,
    parse_qos_reserved,
    parse_seconds,
    parse_str,
)
from agent.recommender.config import parse_recommender
from agent.rollout.config import parse_rollout_settings
from agent.vpa.config import parse_vpa_settings

# config key -> (settings field, parser)
KEYS: Final[dict[str, tuple[str, Any]]] = {
    "cgroupfs": ("cgroupfs", lambda v: Path(parse_str(v))),
    "cgroupRoot": ("cgroup_root", parse_str),
    "cgroupDriver": ("cgroup_driver", parse_driver),
    "cgroupVersion": ("cgroup_version", parse_cgroup_version),
    "pods": ("pods", parse_str),
    "kubeconfig": ("kubeconfig", parse_str),
    "nodeName": ("node_name", parse_str),
    "criEndpoint": ("cri_endpoint", parse_str),
    "allocatable": ("allocatable", parse_allocatable),
    "qosReserved": ("qos_reserved_memory_percent", parse_qos_reserved),
    "cpuManagerPolicy": ("cpu_manager_policy", parse_cpu_manager_policy),
    "cpuCFSQuota": ("cpu_cfs_quota", parse_bool),
    "cpuCFSQuotaPeriod": ("cpu_cfs_quota_period_us", parse_cfs_period),
    "cpuWeightFormula": ("cpu_weight_formula", parse_formula),
    "containerCpuWeightFormula": ("container_cpu_weight_formula", parse_formula),
    "hugepageSizes": ("hugepage_sizes", parse_hugepage_sizes),
    "podMemoryReservation": ("pod_memory_reservation", parse_bool),
    "createQOSCgroups": ("create_qos_cgroups", parse_bool),
    "stateDir": ("state_dir", lambda v: Path(parse_str(v))),
    "resyncPeriod": ("resync_period_s", parse_seconds),
    "metricsBindAddress": ("metrics_bind_address", parse_bind_address),
    "healthBindAddress": ("health_bind_address", parse_bind_address),
    "observeOnly": ("observe_only", parse_bool),
    "ownership": ("ownership", parse_ownership),
    "memoryReclaimStepDown": ("memory_reclaim_step_down", parse_bool),
    "kubeReserved": ("kube_reserved", parse_allocatable),
    "systemReserved": ("system_reserved", parse_allocatable),
    "evictionHard": ("eviction_hard_memory", parse_eviction_hard),
    "featureGates": ("feature_gates", parse_feature_gates),
    "kubeletVersion": ("kubelet_version", parse_kubelet_version),
    "driftMaxReverts": ("drift_max_reverts", parse_positive_int),
    "driftBackoff": ("drift_backoff_s", parse_seconds),
    "workers": ("workers", parse_positive_int),
    "apiQPS": ("api_qps", parse_positive_float),
    "apiBurst": ("api_burst", parse_positive_int),
    "podsPollInterval": ("pods_poll_interval_s", parse_seconds),
    "reconciler": ("reconciler", choice("auto", "engine", "pipeline")),
    "logFormat": ("log_format", choice("auto", "json", "console", "journal")),
    "logLevel": ("log_level", choice("debug", "info", "warning", "error")),
    "kubeletConfig": ("kubelet_config", lambda v: Path(parse_str(v))),
    "cgroupsPerQOS": ("cgroups_per_qos", parse_bool),
    "enforceNodeAllocatable": ("enforce_node_allocatable", parse_enforce_node_allocatable),
    "recommender": ("recommender", parse_recommender),
    "vpa": ("vpa", parse_vpa_settings),
    "rollout": ("rollout", parse_rollout_settings),
    "annotationNamespaces": ("annotation_namespaces", lambda v: parse_namespaces(v)),
}
# paths, which a config file gives relative to itself
PATH_KEYS: Final = {"cgroupfs", "pods", "stateDir", "kubeconfig", "kubeletConfig"}
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
    name, convert = KEYS[key]
    return name, convert(value)
