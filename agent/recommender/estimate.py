"""From a container's history to VPA's recommendation (logic/recommender.go CreatePodResourceRecommender,
logic/estimator.go): percentile → + margin → × confidence multiplier (upper and lower bounds) → at least the
pod minimum shared equally by the pod's containers. CPU in millicores, memory in bytes, truncated to whole
units as VPA's ResourceAmount is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.recommender.config import RecommenderSettings
from agent.recommender.model import ContainerHistory

MAX_RESOURCE_AMOUNT = 1e14  # model/types.go MaxResourceAmount


def _amount(x: float) -> int:
    """model/types.go resourceAmountFromFloat: capped, never negative, truncated."""
    if x > MAX_RESOURCE_AMOUNT or math.isnan(x):
        return int(MAX_RESOURCE_AMOUNT)
    return int(max(x, 0.0))


def _scale(amount: int, factor: float) -> int:
    return _amount(amount * factor)


def confidence(h: ContainerHistory, interval_s: float) -> float:
    """estimator.go getConfidence: min(lifespan in intervals, samples / minutes per interval)."""
    if h.first_sample is None or h.last_sample is None:
        return 0.0
    lifespan = (h.last_sample - h.first_sample) / interval_s
    samples = h.samples / (interval_s / 60.0)
    return min(lifespan, samples)


@dataclass(frozen=True, slots=True)
class Estimate:
    cpu_milli: int
    memory: int


@dataclass(frozen=True, slots=True)
class Recommendation:
    target: Estimate
    lower: Estimate
    upper: Estimate
    uncapped: Estimate  # before a VPA policy's min/maxAllowed (none here: equal to target)
    confidence: float


def _with_margin(amount: int, s: RecommenderSettings) -> int:
    return amount + _scale(amount, s.recommendation_margin_fraction)


def _multiplier(amount: int, conf: float, multiplier: float, exponent: float) -> int:
    base = 1.0 + multiplier / conf if conf > 0 else math.inf
    try:
        factor = math.pow(base, exponent)
    except OverflowError:
        factor = math.inf
    return _scale(amount, factor)


def recommend(h: ContainerHistory, s: RecommenderSettings, containers_in_pod: int) -> Recommendation:
    fraction = 1.0 / max(containers_in_pod, 1)
    min_cpu = _scale(_amount(s.pod_recommendation_min_cpu_millicores * 0.001 * 1000.0), fraction)
    min_mem = _scale(_amount(s.pod_recommendation_min_memory_mb * 1024 * 1024), fraction)

    def cpu(p: float) -> int:
        return _with_margin(_amount(h.cpu.percentile(p) * 1000.0), s)

    def mem(p: float) -> int:
        return _with_margin(_amount(h.memory.percentile(p)), s)

    conf_cpu = confidence(h, s.confidence_interval_cpu_s)
    conf_mem = confidence(h, s.confidence_interval_memory_s)
    target = Estimate(max(cpu(s.target_cpu_percentile), min_cpu), max(mem(s.target_memory_percentile), min_mem))
    upper = Estimate(
        max(_multiplier(cpu(s.recommendation_upper_bound_cpu_percentile), conf_cpu, 1.0, 1.0), min_cpu),
        max(_multiplier(mem(s.recommendation_upper_bound_memory_percentile), conf_mem, 1.0, 1.0), min_mem),
    )
    lower = Estimate(
        max(_multiplier(cpu(s.recommendation_lower_bound_cpu_percentile), conf_cpu, 0.001, -2.0), min_cpu),
        max(_multiplier(mem(s.recommendation_lower_bound_memory_percentile), conf_mem, 0.001, -2.0), min_mem),
    )
    return Recommendation(target, lower, upper, target, conf_cpu)
