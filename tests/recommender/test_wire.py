"""A container history as a node publishes it: what the merge reads survives the round trip (the weights to
1/10,000 of the largest, the rest exactly), the recommendation from the merged decoded histories is within
one histogram bucket of the one from the histories themselves, a version 1 string (a node not yet upgraded)
still reads, version 2 is at least a quarter shorter than version 1 was, and anything else a node could have
written is refused with a reason."""

from __future__ import annotations

import functools
import json
import math
import random
import re
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.recommender import wire
from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import Estimate, recommend
from agent.recommender.histogram import DecayingHistogram, ExponentialOptions
from agent.recommender.model import ContainerHistory
from agent.recommender.state import RecommenderState
from agent.recommender.trace import Sample

S = RecommenderSettings()
T0 = 1_764_000_000.0


# ---- version 1, as the nodes not yet upgraded write it (the encoder the project shipped before version 2)

def _v1_num(v: float) -> float | int:
    if v == 0 or not math.isfinite(v):
        return 0
    out = float(f"{v:.5g}")
    return int(out) if out.is_integer() and abs(out) < 1e15 else out


def _v1_hist(h: DecayingHistogram) -> list[object]:
    held = sorted(b for b, w in h.hist.weights.items() if w > 0)
    if not held:
        return [h.reference, _v1_num(h.hist.total), 0, []]
    return [h.reference, _v1_num(h.hist.total), held[0], [_v1_num(h.hist.weights.get(b, 0.0)) for b in range(held[0], held[-1] + 1)]]


def _v1_encode(h: ContainerHistory) -> str:
    return json.dumps([1, _v1_hist(h.cpu), _v1_hist(h.memory), h.first_sample, h.last_sample, h.samples, h.ooms, h.last_seen],
                      separators=(",", ":"))


# ---- histories

def _history(seed: int, days: float = 8, cpu_mu: float = -1.6, mem: float = 300e6, step_s: float = 60,
             t0: float = T0) -> ContainerHistory:
    rng = random.Random(seed)
    h = ContainerHistory(S)
    for i in range(int(days * 86_400 / step_s)):
        t = t0 + step_s * i
        h.add_cpu(t, rng.lognormvariate(cpu_mu, 0.5))
        h.add_memory(t, mem * rng.lognormvariate(0, 0.15))
    h.record_oom(t0 + days * 86_400 - 30, 256e6)
    return h


@functools.cache
def _representative() -> ContainerHistory:
    """A long-running container as the daemon's sampler feeds its state: 8 days (the memory window) of a
    sample every 10 s at sampling's own times (the daemon's every second gives the same shape, a string a
    few percent longer in both versions), CPU around 0.25 cores with a daily swing of ±50 % and a log-normal
    spread, its working set around 300 MB with the same swing. Read only: one for every test."""
    rng = random.Random(1)
    state = RecommenderState(S)
    for i in range(8 * 8_640):
        t = T0 + 10 * i + rng.random()
        daily = 1 + 0.5 * math.sin(2 * math.pi * (t % 86_400) / 86_400)
        state.observe(Sample(t, "shop/api-0", "app", cpu=0.25 * daily * rng.lognormvariate(0, 0.4),
                             memory=300e6 * daily * rng.lognormvariate(0, 0.1)))
    return state.histories[("shop/api-0", "app")]


def _within_a_ten_thousandth_of_the_largest(back: DecayingHistogram, h: DecayingHistogram) -> None:
    top = max(h.hist.weights.values())
    assert set(back.hist.weights) <= {b for b, w in h.hist.weights.items() if w > 0}
    for b, w in h.hist.weights.items():
        assert abs(back.hist.weights.get(b, 0.0) - w) <= top * 1e-4, (b, w, back.hist.weights.get(b))
    assert back.hist.total == pytest.approx(h.hist.total, rel=5e-5)
    assert (back.hist.min_bucket, back.hist.max_bucket) == (min(back.hist.weights), max(back.hist.weights))


def test_the_merge_fields_survive_and_the_weights_to_a_ten_thousandth_of_the_largest() -> None:
    h = _representative()
    back = wire.decode(S, wire.encode(h))
    assert (back.first_sample, back.last_sample, back.samples, back.ooms, back.last_seen) == (
        h.first_sample, h.last_sample, h.samples, h.ooms, h.last_seen)
    assert back.cpu.reference == h.cpu.reference and back.memory.reference == h.memory.reference
    _within_a_ten_thousandth_of_the_largest(back.cpu, h.cpu)
    _within_a_ten_thousandth_of_the_largest(back.memory, h.memory)
    assert recommend(back, S, 1) == recommend(h, S, 1)


def test_the_weights_are_integers_up_to_10000_without_zero_buckets_at_either_end() -> None:
    raw = json.loads(wire.encode(_representative()))
    assert raw[0] == 2
    for _, total, first, weights in (raw[1], raw[2]):
        assert max(weights) == wire.MAX_WEIGHT and all(isinstance(w, int) and 0 <= w <= wire.MAX_WEIGHT for w in weights)
        assert weights[0] > 0 and weights[-1] > 0 and first >= 0 and total > 0


def test_a_version_1_string_still_reads() -> None:
    """A node not yet upgraded (a rolling upgrade) still publishes version 1: read as it always was."""
    h = _representative()
    back = wire.decode(S, _v1_encode(h))
    assert (back.first_sample, back.last_sample, back.samples, back.ooms, back.last_seen) == (
        h.first_sample, h.last_sample, h.samples, h.ooms, h.last_seen)
    assert set(back.cpu.hist.weights) == {b for b, w in h.cpu.hist.weights.items() if w > 0}
    for b, w in back.cpu.hist.weights.items():
        assert w == pytest.approx(h.cpu.hist.weights[b], rel=5e-5)
    assert recommend(back, S, 1) == recommend(h, S, 1)
    literal = wire.decode(S, "[1,[1764028800.0,3.5,4,[1.25,0,2.25]],[1764115200.0,2,27,[2]],1764000000.5,1764086400.5,"
                             "1440,0,1764086400.5]")
    assert literal.cpu.hist.weights == {4: 1.25, 6: 2.25} and literal.cpu.hist.total == 3.5
    assert literal.memory.hist.weights == {27: 2.0} and literal.cpu.reference == 1_764_028_800.0
    assert (literal.first_sample, literal.samples, literal.last_seen) == (1_764_000_000.5, 1440, 1_764_086_400.5)


def test_version_2_is_at_least_a_quarter_shorter_than_version_1() -> None:
    h = _representative()
    v1, v2 = len(_v1_encode(h)), len(wire.encode(h))
    assert v2 <= 0.75 * v1, (v1, v2)  # 436 -> 317 bytes


def test_the_string_is_at_most_a_third_of_the_json_map_it_replaces() -> None:
    h = _history(2)
    text = wire.encode(h)
    as_map = json.dumps(h.to_dict(), separators=(",", ":"))
    assert len(text) * 3 <= len(as_map), (len(text), len(as_map), text)


def _bucket(options: ExponentialOptions, end: float) -> int:
    """The bucket a percentile ends (a percentile is the start of the next bucket)."""
    return options.find_bucket(end * (1 + 1e-9)) - 1


def _as_far_as_the_percentiles(a: int, b: int, pa: float, pb: float) -> bool:
    """Two amounts (millicores, bytes) made of the same margin and confidence multipliers from percentiles
    `pa` and `pb`: apart by the percentiles' ratio at most, but for the truncations to whole units (up to
    three an amount: the percentile, the margin, a bound's multiplier; the smaller's scaled by the ratio)."""
    ratio = max(pa, pb) / min(pa, pb)
    return max(a, b) <= min(a, b) * ratio + 3 * (ratio + 1)


TIE: Final = 1e-3  # of the total: more than the rounding moves a cumulative weight (half of 1/10,000 a bucket)


def _moved_only_at_a_tie(h: DecayingHistogram, p: float, ka: int, kb: int) -> bool:
    """A percentile is the first bucket where the cumulative weight reaches p × total: where that threshold
    lies within the rounding of a bucket's cumulative weight (a tie), any rounding of the weights — version
    1's 5 digits too — can put it on either side, at the next bucket that holds weight. So a percentile that
    moved sat at a tie, and crossed only buckets without weight to speak of."""
    weights, total = h.hist.weights, h.hist.total
    cumulative, at_tie = 0.0, False
    for b in sorted(weights):
        cumulative += weights[b]
        at_tie = at_tie or abs(cumulative - p * total) <= TIE * total
    crossed = sum(w for b, w in weights.items() if min(ka, kb) < b < max(ka, kb))
    return at_tie and crossed <= TIE * total


node_history = st.builds(
    _history,
    seed=st.integers(0, 10_000),
    days=st.sampled_from([0.25, 1.0, 3.0]),
    cpu_mu=st.floats(-4.0, 1.0),
    mem=st.floats(2e7, 8e9),
    step_s=st.sampled_from([60.0, 300.0]),
    t0=st.sampled_from([T0, T0 + 3_600.0, T0 + 86_400.0]),
)


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(node_history, min_size=1, max_size=4))
def test_the_recommendation_from_merged_decoded_histories_is_within_one_bucket(nodes: list[ContainerHistory]) -> None:
    """Each percentile of the merged decoded histories is that of the merged histories themselves — but at a
    tie, where it is the next bucket holding weight (one bucket away where usage fills the buckets) — and so
    is the recommendation made of them."""
    merged, decoded = ContainerHistory(S), ContainerHistory(S)
    for h in nodes:
        merged.merge(h)
        decoded.merge(wire.decode(S, wire.encode(h)))
    x, y = recommend(merged, S, 1), recommend(decoded, S, 1)
    assert x.confidence == y.confidence
    amounts: list[tuple[float, Estimate, Estimate]] = [
        (S.target_cpu_percentile, x.target, y.target), (S.recommendation_lower_bound_cpu_percentile, x.lower, y.lower),
        (S.recommendation_upper_bound_cpu_percentile, x.upper, y.upper)]
    for p, e, f in amounts:
        pa, pb = merged.cpu.percentile(p), decoded.cpu.percentile(p)
        ka, kb = _bucket(S.cpu_options, pa), _bucket(S.cpu_options, pb)
        if ka == kb:
            assert e.cpu_milli == f.cpu_milli
        else:
            assert _moved_only_at_a_tie(merged.cpu, p, ka, kb), (p, ka, kb)
            assert _as_far_as_the_percentiles(e.cpu_milli, f.cpu_milli, pa, pb), (e, f)
    amounts = [
        (S.target_memory_percentile, x.target, y.target), (S.recommendation_lower_bound_memory_percentile, x.lower, y.lower),
        (S.recommendation_upper_bound_memory_percentile, x.upper, y.upper)]
    for p, e, f in amounts:
        pa, pb = merged.memory.percentile(p), decoded.memory.percentile(p)
        ka, kb = _bucket(S.memory_options, pa), _bucket(S.memory_options, pb)
        if ka == kb:
            assert e.memory == f.memory
        else:
            assert _moved_only_at_a_tie(merged.memory, p, ka, kb), (p, ka, kb)
            assert _as_far_as_the_percentiles(e.memory, f.memory, pa, pb), (e, f)


def test_at_a_tie_a_percentile_is_on_either_side_of_it_whatever_the_rounding() -> None:
    """The case the property above allows, found by it: four nodes, three of them one container's memory
    at the same times, so that the 0.9 percentile's threshold is exactly a bucket's cumulative weight.
    Version 1 (5 digits) moves it too."""
    nodes = [_history(0, days=0.25, cpu_mu=0.0, mem=2e7), _history(0, days=0.25, cpu_mu=0.0, mem=2e7),
             _history(0, days=0.25, cpu_mu=0.0, mem=204_558_251.0), _history(0, days=3.0, cpu_mu=0.0, mem=2e7)]
    merged, v1, v2 = ContainerHistory(S), ContainerHistory(S), ContainerHistory(S)
    for h in nodes:
        merged.merge(h)
        v1.merge(wire.decode(S, _v1_encode(h)))
        v2.merge(wire.decode(S, wire.encode(h)))
    k = _bucket(S.memory_options, merged.memory.percentile(0.9))
    for back in (v1, v2):
        kb = _bucket(S.memory_options, back.memory.percentile(0.9))
        assert kb != k and _moved_only_at_a_tie(merged.memory, 0.9, k, kb)


def test_an_empty_history_round_trips() -> None:
    back = wire.decode(S, wire.encode(ContainerHistory(S)))
    assert back.cpu.is_empty() and back.memory.is_empty() and back.samples == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (42, "not a history string"),
        ("x" * (wire.MAX_CHARS + 1), "not a history string"),
        ("{not json", "not JSON"),
        ("[3, [0, 0, 0, []], [0, 0, 0, []], null, null, 0, 0, null]", "not a version 1 or 2 history"),
        ("[true, [0, 0, 0, []], [0, 0, 0, []], null, null, 0, 0, null]", "not a version 1 or 2 history"),
        ("[2.0, [0, 0, 0, []], [0, 0, 0, []], null, null, 0, 0, null]", "not a version 1 or 2 history"),
        ("[2, [0, 0, []]]", "not a version 1 or 2 history"),
        ("[2, [0, 0, [1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: not [reference"),
        ("[2, [0, 1, 99999, [1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: buckets 99999+1 out of range"),
        ("[2, [0, 1, true, [1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: buckets True"),
        ("[2, [0, 1, 0, [1.5]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weight 1.5 is not an integer in [0, 10000]"),
        ("[2, [0, 1, 0, [10001]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weight 10001 is not an integer"),
        ("[2, [0, 1, 0, [-1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weight -1 is not an integer"),
        ("[2, [0, 0, 0, [5]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weights without a total above zero"),
        ("[2, [0, null, 0, [5]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weights without a total above zero"),
        ('[2, [0, 0, 0, []], [0, 0, 0, []], "x", null, 0, 0, null]', "first_sample must be a number"),
        ("[2, [0, 0, 0, []], [0, 0, 0, []], null, null, -3, 0, null]", "samples must be a non-negative integer"),
        ("[2, [0, 0, 0, []], [0, \"t\", 0, []], null, null, 0, 0, null]", "memory total must be a number"),
        # version 1's own refusals
        ("[1, [0, 0, 0, [1, -1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weight -1 is not a non-negative number"),
        ("[1, [0, 0, 0, []], [0, 0, 0, [1, 1e999]], null, null, 0, 0, null]", "memory weight must be a number"),
    ],
)
def test_what_a_node_could_have_written_is_refused_with_a_reason(text: object, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        wire.decode(S, text)
