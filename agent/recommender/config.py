"""The recommender's knobs, each named as the VPA recommender's flag is (config key = flag name in camelCase
under `recommender:`), with VPA's defaults and where each comes from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final

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


@dataclass(frozen=True, slots=True)
class RecommenderSettings:
    """The `recommender` section: the local sampler and the VPA recommender's own knobs."""

    enabled: bool = False  # the sampler in the daemon; `recommend --samples` works regardless
    sample_interval_s: float = 1.0  # the node samples CPU every second (VPA: metrics once a minute)
    # --recommender-interval (VPA: 1 minute): each node publishes its histories and each holder merges once an
    # interval; 5 minutes keeps the writes of 5,000 nodes under 20 a second (publish.py)
    recommender_interval_s: float = 300.0
    # --cpu-histogram-decay-half-life / --memory-histogram-decay-half-life (aggregations_config.go: 24h)
    cpu_histogram_decay_half_life_s: float = DAY_S
    memory_histogram_decay_half_life_s: float = DAY_S
    # --memory-aggregation-interval (24h) and --memory-aggregation-interval-count (8): the memory window
    memory_aggregation_interval_s: float = DAY_S
    memory_aggregation_interval_count: int = 8
    # --target-cpu-percentile 0.9, --recommendation-lower-bound-cpu-percentile 0.5, upper 0.95 (recommender.go)
    target_cpu_percentile: float = 0.9
    recommendation_lower_bound_cpu_percentile: float = 0.5
    recommendation_upper_bound_cpu_percentile: float = 0.95
    target_memory_percentile: float = 0.9
    recommendation_lower_bound_memory_percentile: float = 0.5
    recommendation_upper_bound_memory_percentile: float = 0.95
    recommendation_margin_fraction: float = 0.15  # --recommendation-margin-fraction
    pod_recommendation_min_cpu_millicores: float = 25.0  # --pod-recommendation-min-cpu-millicores
    pod_recommendation_min_memory_mb: float = 250.0  # --pod-recommendation-min-memory-mb (×1024×1024 in VPA)
    confidence_interval_cpu_s: float = DAY_S  # --confidence-interval-cpu
    confidence_interval_memory_s: float = DAY_S  # --confidence-interval-memory
    oom_bump_up_ratio: float = 1.2  # --oom-bump-up-ratio (model/container.go DefaultOOMBumpUpRatio)
    oom_min_bump_up_bytes: float = 100 * 1024 * 1024  # --oom-min-bump-up-bytes (DefaultOOMMinBumpUp, 100 MiB)
    # Beyond VPA, off by default where they change the model:
    cpu_starvation: bool = False  # a throttled container's CPU sample is taken at its limit
    throttle_threshold: float = 0.2  # fraction of CFS periods throttled above which a sample is starved
    react_to_oom: bool = True  # an OOM kill seen on the node is recorded at once (not at the next minute)
    state_file: str = "recommender.json"  # under stateDir

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
