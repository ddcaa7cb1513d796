"""The recommender's knobs, each named as the VPA recommender's flag is (config key = flag name in camelCase
under `recommender:`), with VPA's defaults and where each comes from."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final

from agent.infra.configsection import doc
from agent.infra.durations import parse_duration_us

if TYPE_CHECKING:  # the histograms are loaded by what samples or recommends, not by every command's settings
    from agent.recommender.histogram import ExponentialOptions

MIN_SAMPLE_WEIGHT: Final = 0.1  # model/aggregations_config.go minSampleWeight
EPSILON: Final = 0.001 * MIN_SAMPLE_WEIGHT  # aggregations_config.go epsilon
BUCKET_GROWTH: Final = 0.05  # aggregations_config.go DefaultHistogramBucketSizeGrowth
CPU_FIRST_BUCKET: Final = 0.01  # cores; aggregations_config.go CPUHistogramOptions
CPU_MAX: Final = 1000.0  # cores; same
MEMORY_FIRST_BUCKET: Final = 1e7  # bytes; aggregations_config.go MemoryHistogramOptions
MEMORY_MAX: Final = 1e12  # bytes; same
DAY_S: Final = 86_400.0


PROMETHEUS_DURATION: Final = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
_PROMETHEUS_UNITS_S: Final = (365 * DAY_S, 7 * DAY_S, DAY_S, 3600.0, 60.0, 1.0, 0.001)
LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # Prometheus's label names
METRIC_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # and metric names


def parse_prometheus_duration(text: str) -> float:
    """A Prometheus duration (prometheus/common model.ParseDuration, as VPA's --history-length and
    --history-resolution are read: `8d`, `1h`, `1h30m`, `90s`, `500ms`) in seconds."""
    m = PROMETHEUS_DURATION.fullmatch(text.strip())
    if not m or not text.strip() or text.strip() == "0":
        raise ValueError(f"{text!r} is not a Prometheus duration like 8d or 1h")
    return sum(int(n) * unit for n, unit in zip(m.groups(), _PROMETHEUS_UNITS_S, strict=True) if n)


def prometheus_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration in its largest whole unit: 691200 is `8d`, 3600 `1h`, 0.5 `500ms`."""
    ms = round(seconds * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """The `recommender.prometheus` section: where a container the node has no history of gets its usage
    history, as VPA's recommender does with `--storage=prometheus` (input/history/history_provider.go).
    Each key is VPA's flag without its `prometheus-` prefix (the section says it), in camelCase, with
    VPA's default (config/config.go), except `address` (VPA: http://prometheus.monitoring.svc), empty here:
    off; and beyond VPA, two bounds of the node's own (`maxSeries`, `maxBytes`) and `caFile`. The token and
    the CA are files read at each load, never kept: a token rotates, and a file gone is a load's failure
    (one line, the node's own history), not the agent's."""

    address: str = field(default="", metadata=doc(
        "VPA's `--prometheus-address` (http://prometheus.monitoring.svc there): the Prometheus whose cAdvisor "
        "series give a container the node has no history of its history, e.g. "
        "`http://prometheus.monitoring.svc:9090`; empty: off", default="empty: off"))
    query_timeout_s: float = field(default=300.0, metadata=doc(
        "VPA's `--prometheus-query-timeout`: each of a load's two range queries (CPU, memory) is given up "
        "after this long"))
    history_length_s: float = field(default=8 * DAY_S, metadata=doc(
        "VPA's `--history-length`, a Prometheus duration: how far back the range queries reach",
        default="`8d`", kind="Prometheus duration"))
    history_resolution_s: float = field(default=3600.0, metadata=doc(
        "VPA's `--history-resolution`, a Prometheus duration: the queries' step and the CPU rate's window "
        "(one sample a step)", default="`1h`", kind="Prometheus duration"))
    cadvisor_job_name: str = field(default="kubernetes-cadvisor", metadata=doc(
        "VPA's `--prometheus-cadvisor-job-name`: the `job` of the cAdvisor series; empty: any job"))
    history_cpu_metric: str = field(default="container_cpu_usage_seconds_total", metadata=doc(
        "VPA's `--history-cpu-metric`: the CPU counter (seconds), read as its `rate` over `historyResolution`"))
    history_memory_metric: str = field(default="container_memory_working_set_bytes", metadata=doc(
        "VPA's `--history-memory-metric`: the memory gauge (bytes), read at each step"))
    container_namespace_label: str = field(default="namespace", metadata=doc(
        "VPA's `--container-namespace-label`: the series' label naming the pod's namespace"))
    container_pod_name_label: str = field(default="pod_name", metadata=doc(
        "VPA's `--container-pod-name-label`: the series' label naming the pod; kubelets since 1.16 write "
        "`pod`"))
    container_name_label: str = field(default="name", metadata=doc(
        "VPA's `--container-name-label`: the series' label naming the container; kubelets since 1.16 write "
        "`container`"))
    max_series: int = field(default=1000, metadata=doc(
        "beyond VPA: a query answering with more series gives no history (one log line)"))
    max_bytes: int = field(default=4 * 1024 * 1024, metadata=doc(
        "beyond VPA: a response body larger than this many bytes is not read further and gives no history "
        "(one log line)"))
    bearer_token_file: str = field(default="", metadata=doc(
        "VPA's `--prometheus-bearer-token-file`: an absolute path; its content is sent as `Authorization: Bearer` "
        "with each query and read again at each load, so a rotated projected ServiceAccount token keeps working; "
        "a file missing, unreadable or empty gives no history (one log line); empty: no token",
        default="empty: none", kind="path"))
    ca_file: str = field(default="", metadata=doc(
        "beyond VPA: an absolute path to the PEM certificates that verify an https:// `address`, read again at "
        "each load; empty: the system's CAs", default="empty: the system's", kind="path"))
    insecure: bool = field(default=False, metadata=doc(
        "VPA's `--prometheus-insecure`: an https:// `address` is not verified at all (neither its CA nor its name); "
        "for tests: whoever answers gets the token and gives the history"))

    @property
    def enabled(self) -> bool:
        return bool(self.address)


PROMETHEUS_KEYS: Final = {
    "address": "address",
    "queryTimeout": "query_timeout_s",
    "historyLength": "history_length_s",
    "historyResolution": "history_resolution_s",
    "cadvisorJobName": "cadvisor_job_name",
    "historyCpuMetric": "history_cpu_metric",
    "historyMemoryMetric": "history_memory_metric",
    "containerNamespaceLabel": "container_namespace_label",
    "containerPodNameLabel": "container_pod_name_label",
    "containerNameLabel": "container_name_label",
    "maxSeries": "max_series",
    "maxBytes": "max_bytes",
    "bearerTokenFile": "bearer_token_file",
    "caFile": "ca_file",
    "insecure": "insecure",
}


def parse_prometheus(raw: object) -> PrometheusSettings:
    """The `recommender.prometheus:` section; ValueError lists every problem, each naming its key."""
    if raw is None:
        return PrometheusSettings()
    if not isinstance(raw, Mapping):
        raise ValueError("recommender.prometheus must be a map of settings")
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = PROMETHEUS_KEYS.get(str(key))
        if name is None:
            problems.append(f"recommender.prometheus: unknown setting {key!r}")
            continue
        try:
            changes[name] = _prometheus_value(name, value)
        except ValueError as err:
            problems.append(f"recommender.prometheus.{key}: {err}")
    out = replace(PrometheusSettings(), **changes)
    if not problems and out.history_resolution_s > out.history_length_s:
        problems.append("recommender.prometheus.historyResolution must not exceed historyLength")
    if not problems and out.address.startswith("http://"):  # TLS settings on a plain address: a mistake
        problems += [f"recommender.prometheus.{key}: only for an https:// address ({out.address} is http://)"
                     for key, on in (("caFile", out.ca_file), ("insecure", out.insecure)) if on]
    if not problems and out.insecure and out.ca_file:
        problems.append("recommender.prometheus.insecure: true verifies nothing, not even with caFile: set one of them")
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _prometheus_value(name: str, value: object) -> object:
    if name == "address":
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a URL")
        if value and not re.fullmatch(r"https?://[^/\s?#@]+(/[^\s?#]*)?", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL without credentials (empty: off)")
        return value.rstrip("/")
    if name == "query_timeout_s":
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"{value!r} is not a duration like 5m")
        seconds = parse_duration_us(value) / 1e6 if isinstance(value, str) else float(value)
        if seconds <= 0:
            raise ValueError(f"{value!r} is not a duration above zero")
        return seconds
    if name in ("history_length_s", "history_resolution_s"):
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a Prometheus duration like 8d or 1h")
        seconds = parse_prometheus_duration(value)
        if seconds <= 0:
            raise ValueError(f"{value!r} is not a duration above zero")
        return seconds
    if name == "insecure":
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        return value
    if name in ("bearer_token_file", "ca_file"):
        if not isinstance(value, str) or (value and (not value.startswith("/") or any(c in value for c in "\0\n"))):
            raise ValueError(f"{value!r} is not an absolute path (empty: none)")
        return value
    if name in ("max_series", "max_bytes"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{value!r} is not a positive integer")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a name")
    if name == "cadvisor_job_name":
        return value
    pattern = METRIC_NAME if name.endswith("_metric") else LABEL_NAME
    if not pattern.fullmatch(value):
        raise ValueError(f"{value!r} is not a Prometheus {'metric' if name.endswith('_metric') else 'label'} name")
    return value


@dataclass(frozen=True, slots=True)
class RecommenderSettings:
    """The `recommender` section: the local sampler and the VPA recommender's own knobs."""

    enabled: bool = field(default=False, metadata=doc(
        "the sampler in the daemon (CPU on every node); `recommend --samples` works regardless"))
    sample_interval_s: float = field(default=1.0, metadata=doc(
        "how often the node's kernel counters are sampled (VPA: metrics once a minute)"))
    # --recommender-interval (VPA: 1 minute): each node publishes its histories and each holder merges once an
    # interval; 5 minutes keeps the writes of 5,000 nodes under 20 a second (publish.py)
    recommender_interval_s: float = field(default=300.0, metadata=doc(
        "VPA's `--recommender-interval` (1m there): each node publishes its NodeHistory and each Lease holder "
        "merges once an interval"))
    # --cpu-histogram-decay-half-life / --memory-histogram-decay-half-life (aggregations_config.go: 24h)
    cpu_histogram_decay_half_life_s: float = field(default=DAY_S, metadata=doc(
        "VPA's `--cpu-histogram-decay-half-life`: a CPU sample's weight halves every this long"))
    memory_histogram_decay_half_life_s: float = field(default=DAY_S, metadata=doc(
        "VPA's `--memory-histogram-decay-half-life`"))
    # --memory-aggregation-interval (24h) and --memory-aggregation-interval-count (8): the memory window
    memory_aggregation_interval_s: float = field(default=DAY_S, metadata=doc(
        "VPA's `--memory-aggregation-interval`: memory is the peak of each interval"))
    memory_aggregation_interval_count: int = field(default=8, metadata=doc(
        "VPA's `--memory-aggregation-interval-count`: the intervals kept (the memory window)"))
    # --target-cpu-percentile 0.9, --recommendation-lower-bound-cpu-percentile 0.5, upper 0.95 (recommender.go)
    target_cpu_percentile: float = field(default=0.9, metadata=doc("VPA's `--target-cpu-percentile`"))
    recommendation_lower_bound_cpu_percentile: float = field(default=0.5, metadata=doc(
        "VPA's `--recommendation-lower-bound-cpu-percentile`"))
    recommendation_upper_bound_cpu_percentile: float = field(default=0.95, metadata=doc(
        "VPA's `--recommendation-upper-bound-cpu-percentile`"))
    target_memory_percentile: float = field(default=0.9, metadata=doc("VPA's `--target-memory-percentile`"))
    recommendation_lower_bound_memory_percentile: float = field(default=0.5, metadata=doc(
        "VPA's `--recommendation-lower-bound-memory-percentile`"))
    recommendation_upper_bound_memory_percentile: float = field(default=0.95, metadata=doc(
        "VPA's `--recommendation-upper-bound-memory-percentile`"))
    recommendation_margin_fraction: float = field(default=0.15, metadata=doc(
        "VPA's `--recommendation-margin-fraction`: added to every estimate"))
    pod_recommendation_min_cpu_millicores: float = field(default=25.0, metadata=doc(
        "VPA's `--pod-recommendation-min-cpu-millicores`: a pod's minimum, shared by its containers"))
    pod_recommendation_min_memory_mb: float = field(default=250.0, metadata=doc(  # ×1024×1024 in VPA
        "VPA's `--pod-recommendation-min-memory-mb` (MiB): a pod's minimum, shared by its containers"))
    confidence_interval_cpu_s: float = field(default=DAY_S, metadata=doc(
        "VPA's `--confidence-interval-cpu`: the history that gives full confidence in the CPU bounds"))
    confidence_interval_memory_s: float = field(default=DAY_S, metadata=doc(
        "VPA's `--confidence-interval-memory`"))
    oom_bump_up_ratio: float = field(default=1.2, metadata=doc(  # model/container.go DefaultOOMBumpUpRatio
        "VPA's `--oom-bump-up-ratio`: an OOM is a memory sample of max(used + oomMinBumpUpBytes, ratio × used)"))
    oom_min_bump_up_bytes: float = field(default=100 * 1024 * 1024, metadata=doc(  # DefaultOOMMinBumpUp, 100 MiB
        "VPA's `--oom-min-bump-up-bytes` (`oomMinBumpUp` too)", key="oomMinBumpUpBytes"))
    # Beyond VPA, off by default where they change the model:
    cpu_starvation: bool = field(default=False, metadata=doc(
        "beyond VPA: a container throttled in more than `throttleThreshold` of its periods has its CPU sample "
        "taken at its limit, since throttling hides its demand"))
    throttle_threshold: float = field(default=0.2, metadata=doc(
        "the fraction of CFS periods throttled above which a sample is starved (`cpuStarvation`)"))
    react_to_oom: bool = field(default=True, metadata=doc(
        "beyond VPA: an OOM kill seen on the node is recorded at once (not at the next minute) and handed to "
        "the VPA actuator's hook"))
    status_min_change: float = field(default=0.10, metadata=doc(
        "beyond VPA: the Lease holder rewrites a VPA's status when a target moved by more than this fraction "
        "(of the larger value), a bound by more than this and one histogram bucket, or a container or condition "
        "changed; 0 writes every target's move; in [0, 1)"))
    state_file: str = field(default="recommender.json", metadata=doc(
        "the histograms' file, under `stateDir`"))
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings, metadata=doc(
        "the history of a container the node has no history of, from Prometheus as VPA's `--storage=prometheus` "
        "reads it (docs/recommender.md); off by default", kind="section"))

    @property
    def cpu_options(self) -> ExponentialOptions:
        from agent.recommender.histogram import ExponentialOptions

        return ExponentialOptions(CPU_MAX, CPU_FIRST_BUCKET, 1 + BUCKET_GROWTH, EPSILON)

    @property
    def memory_options(self) -> ExponentialOptions:
        from agent.recommender.histogram import ExponentialOptions

        return ExponentialOptions(MEMORY_MAX, MEMORY_FIRST_BUCKET, 1 + BUCKET_GROWTH, EPSILON)

    @property
    def memory_window_s(self) -> float:
        return self.memory_aggregation_interval_s * self.memory_aggregation_interval_count


def _camel(name: str) -> str:
    head, *rest = name.removesuffix("_s").removesuffix("_bytes").split("_")
    return head + "".join(w.capitalize() for w in rest)


KEYS: Final = {_camel(f.name): f.name for f in fields(RecommenderSettings)} | {"oomMinBumpUpBytes": "oom_min_bump_up_bytes"}


def parse_recommender(raw: object) -> RecommenderSettings:
    """The `recommender:` config section; ValueError lists every problem."""
    if raw is None:
        return RecommenderSettings()
    if not isinstance(raw, Mapping):
        raise ValueError("recommender must be a map of settings")
    base = RecommenderSettings()
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = KEYS.get(str(key))
        if name is None:
            problems.append(f"recommender: unknown setting {key!r}")
            continue
        if name == "prometheus":
            try:
                changes[name] = parse_prometheus(value)
            except ValueError as err:
                problems.append(str(err))
            continue
        default = getattr(base, name)
        try:
            changes[name] = _convert(value, default, name)
        except ValueError as err:
            problems.append(f"recommender.{key}: {err}")
    out = replace(base, **changes)
    for name in ("target_cpu_percentile", "recommendation_lower_bound_cpu_percentile",
                 "recommendation_upper_bound_cpu_percentile", "target_memory_percentile",
                 "recommendation_lower_bound_memory_percentile", "recommendation_upper_bound_memory_percentile",
                 "throttle_threshold"):
        if not 0.0 < getattr(out, name) <= 1.0:
            problems.append(f"recommender.{_camel(name)} must be in (0, 1]")
    if not 0.0 <= out.status_min_change < 1.0:
        problems.append("recommender.statusMinChange must be in [0, 1)")
    for name in ("sample_interval_s", "recommender_interval_s"):
        if getattr(out, name) <= 0:
            problems.append(f"recommender.{_camel(name)} must be above zero")
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _convert(value: object, default: object, name: str) -> object:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{value!r} is not a positive integer")
        return value
    if isinstance(default, float):
        if name.endswith("_s") and isinstance(value, str):
            return parse_duration_us(value) / 1e6
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{value!r} is not a non-negative number")
        return float(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{value!r} is not a file name")
    return value
