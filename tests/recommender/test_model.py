"""VPA's model on synthetic traces. Every expected value comes from a short reference computation written
here (bucket starts from the closed formula, weights 2^((t - ref)/half-life) summed in a plain loop), not
from the code under test; results must agree to the bucket (they agree exactly: same bucket end, same
truncation)."""

from __future__ import annotations

import math

import pytest

from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import recommend
from agent.recommender.model import ContainerHistory

DAY = 86_400.0
T0 = 1_764_000_000.0  # 2025-11-24T16:00:00Z: not a multiple of a day, so the reference rounding matters
S = RecommenderSettings()
MI = 2**20


# ---- the reference (independent of agent.recommender) ----

def ref_bucket(value: float, first: float) -> int:
    """floor(log_1.05(value * 0.05 / first + 1)); bucket 0 below the first bucket size."""
    return 0 if value < first else int(math.log(value * 0.05 / first + 1) / math.log(1.05))


def ref_bucket_end(b: int, first: float) -> float:
    """The start of bucket b+1: first * (1.05^(b+1) - 1) / 0.05."""
    return first * (1.05 ** (b + 1) - 1) / 0.05


def ref_reference_time(t: float) -> float:
    """Go's t.Round(24h) from year 1, which is UNIX midnight rounding (719162 whole days apart)."""
    return math.floor(t / DAY + 0.5) * DAY


def ref_percentile(samples: list[tuple[float, float, float]], p: float, first: float) -> float:
    """samples: (value, weight, time). Weights decay from the reference fixed by the first sample."""
    ref = ref_reference_time(samples[0][2])
    weights: dict[int, float] = {}
    for value, w, t in samples:
        b = ref_bucket(value, first)
        weights[b] = weights.get(b, 0.0) + w * 2 ** ((t - ref) / DAY)
    total = sum(weights.values())
    acc = 0.0
    for b in sorted(weights):
        acc += weights[b]
        if acc >= p * total:
            return ref_bucket_end(b, first)
    raise AssertionError("unreachable")


def with_margin(x: int) -> int:
    return x + int(x * 0.15)


def cpu_history(values: list[float], step: float = 60.0) -> tuple[ContainerHistory, list[tuple[float, float, float]]]:
    h = ContainerHistory(S)
    samples = []
    for i, v in enumerate(values):
        t = T0 + i * step
        assert h.add_cpu(t, v)
        samples.append((v, 0.1, t))
    return h, samples


def cpu_target(samples: list[tuple[float, float, float]], p: float = 0.9) -> int:
    return with_margin(int(ref_percentile(samples, p, 0.01) * 1000))


# ---- CPU traces ----

def test_steady_two_days() -> None:
    h, samples = cpu_history([0.5] * 2880)  # one sample a minute for two days
    r = recommend(h, S, containers_in_pod=1)
    end = ref_bucket_end(ref_bucket(0.5, 0.01), 0.01)  # bucket 25 ends at 0.5557 cores
    assert r.target.cpu_milli == with_margin(int(end * 1000)) == cpu_target(samples)
    conf = min((2879 * 60) / DAY, 2880 / 1440)  # lifespan (2 days less a minute) vs sample count (2)
    assert r.confidence == pytest.approx(conf)
    assert r.upper.cpu_milli == int(with_margin(int(end * 1000)) * (1 + 1 / conf))
    assert r.lower.cpu_milli == int(with_margin(int(end * 1000)) * (1 + 0.001 / conf) ** -2)


def test_spiky_usage_targets_the_spikes() -> None:
    values = [2.0 if i % 5 == 4 else 0.1 for i in range(1440)]  # a fifth of the minutes at 2 cores
    h, samples = cpu_history(values)
    r = recommend(h, S, 1)
    assert r.target.cpu_milli == cpu_target(samples, 0.9)
    assert r.target.cpu_milli > 2000  # p90 lies in the spikes
    lower_base = with_margin(int(ref_percentile(samples, 0.5, 0.01) * 1000))
    assert lower_base < 200  # the median does not
    assert r.lower.cpu_milli == int(lower_base * (1 + 0.001 / r.confidence) ** -2)


def test_daily_cycle() -> None:
    values = [0.6 + 0.5 * math.sin(2 * math.pi * i / 1440) for i in range(3 * 1440)]  # 0.1..1.1 cores, 3 days
    h, samples = cpu_history(values)
    r = recommend(h, S, 1)
    assert r.target.cpu_milli == cpu_target(samples)
    assert 1000 < r.target.cpu_milli < 1300  # near the daily peak (1.1 cores) plus the margin


def test_slowly_growing_weighs_recent_samples_more() -> None:
    values = [0.1 + 0.9 * i / (4 * 1440) for i in range(4 * 1440)]  # 0.1 -> 1.0 cores over four days
    h, samples = cpu_history(values)
    r = recommend(h, S, 1)
    assert r.target.cpu_milli == cpu_target(samples)
    flat = sorted(values)[int(0.9 * len(values))]  # p90 with no decay
    assert r.target.cpu_milli > with_margin(int(flat * 1000))  # decay pulls the target toward recent usage


def test_decay_halves_weight_per_half_life_and_the_reference_moves_after_100() -> None:
    h = ContainerHistory(S)
    h.add_cpu(T0, 1.0)
    h.add_cpu(T0 + DAY, 0.05)
    b_hi, b_lo = ref_bucket(1.0, 0.01), ref_bucket(0.05, 0.01)
    ref = ref_reference_time(T0)
    assert h.cpu.reference == ref
    assert h.cpu.hist.weights[b_hi] == pytest.approx(0.1 * 2 ** ((T0 - ref) / DAY))
    assert h.cpu.hist.weights[b_lo] == pytest.approx(0.1 * 2 ** ((T0 + DAY - ref) / DAY))  # twice as heavy
    late = T0 + 101 * DAY
    h.add_cpu(late, 0.05)  # past 2^100: the reference moves to the new sample's day, weights scale down
    new_ref = ref_reference_time(late)
    assert h.cpu.reference == new_ref
    shift = math.floor((ref - new_ref) / DAY + 0.5)
    assert h.cpu.hist.weights[b_hi] == pytest.approx(0.1 * 2 ** ((T0 - ref) / DAY) * 2.0**shift)


# ---- memory ----

def test_memory_takes_the_peak_of_each_interval() -> None:
    h = ContainerHistory(S)
    peaks = [300e6, 450e6, 360e6]  # above the 250Mi pod minimum
    samples = []
    for day, peak in enumerate(peaks):
        for minute in range(0, 1440, 10):
            t = T0 + day * DAY + minute * 60
            h.add_memory(t, peak if minute == 600 else peak / 2)
        samples.append((peak, 1.0, T0 + (day + 1) * DAY))  # each interval's peak, stamped at its end
    r = recommend(h, S, 1)
    assert r.target.memory == with_margin(int(ref_percentile(samples, 0.9, 1e7)))
    assert r.lower.memory > 0


def test_oom_bumps_memory_by_vpa_rule() -> None:
    h = ContainerHistory(S)
    h.add_memory(T0, 200e6)
    assert h.record_oom(T0 + 60, requested_memory=256 * MI)
    needed = max(256 * MI + 100 * MI, 1.2 * 256 * MI)  # used = max(request 256Mi, peak 200MB) = 256Mi
    assert h.oom_peak == int(needed) == 356 * MI
    # the interval's old peak (200MB) was replaced by the OOM sample
    r = recommend(h, S, 1)
    assert r.target.memory == with_margin(int(ref_percentile([(needed, 1.0, T0)], 0.9, 1e7)))


def test_an_oom_older_than_one_interval_is_dropped() -> None:
    h = ContainerHistory(S)
    h.add_memory(T0 + 3 * DAY, 100e6)
    assert not h.record_oom(T0, requested_memory=0)


def test_out_of_order_cpu_samples_are_discarded() -> None:
    h = ContainerHistory(S)
    assert h.add_cpu(T0, 0.2)
    assert not h.add_cpu(T0, 0.3) and not h.add_cpu(T0 - 1, 0.3)
    assert h.samples == 1


# ---- minimums and confidence ----

def test_pod_minimums_are_shared_by_the_containers() -> None:
    h, _ = cpu_history([0.001] * 10)
    h.add_memory(T0, 1e6)
    r = recommend(h, S, containers_in_pod=2)
    assert r.target.cpu_milli == 12  # 25m / 2, truncated
    assert r.target.memory == 250 * 1024 * 1024 // 2  # --pod-recommendation-min-memory-mb × 1024 × 1024 / 2


def test_no_history_means_unbounded_upper_and_zero_lower_before_minimums() -> None:
    h = ContainerHistory(S)
    h.add_memory(T0, 300e6)
    r = recommend(h, S, 1)
    assert r.confidence == 0.0
    assert r.upper.memory == int(1e14)  # ×∞ capped at MaxResourceAmount
    assert r.lower.memory == 250 * MI  # ×0, then the pod minimum
