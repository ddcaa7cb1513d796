"""A container history as a node publishes it: what the merge reads survives the round trip (the
recommendation from the decoded history is the one from the history itself), the string is a fraction of
the JSON map it replaces, and anything else a node could have written is refused with a reason."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.recommender import wire
from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import recommend
from agent.recommender.model import ContainerHistory

S = RecommenderSettings()
T0 = 1_764_000_000.0


def _history(seed: int, days: int = 8, cpu_mu: float = -1.6, mem: float = 300e6) -> ContainerHistory:
    rng = random.Random(seed)
    h = ContainerHistory(S)
    for i in range(days * 24 * 60):
        t = T0 + 60 * i
        h.add_cpu(t, rng.lognormvariate(cpu_mu, 0.5))
        h.add_memory(t, mem * rng.lognormvariate(0, 0.15))
    h.record_oom(T0 + days * 86_400 - 30, 256e6)
    return h


def test_the_merge_fields_survive_and_the_recommendation_is_the_same() -> None:
    h = _history(1)
    back = wire.decode(S, wire.encode(h))
    assert (back.first_sample, back.last_sample, back.samples, back.ooms, back.last_seen) == (
        h.first_sample, h.last_sample, h.samples, h.ooms, h.last_seen)
    assert back.cpu.reference == h.cpu.reference and back.memory.reference == h.memory.reference
    assert set(back.cpu.hist.weights) == {b for b, w in h.cpu.hist.weights.items() if w > 0}
    for b, w in back.cpu.hist.weights.items():
        assert w == pytest.approx(h.cpu.hist.weights[b], rel=5e-5)
    assert recommend(back, S, 1) == recommend(h, S, 1)


def test_the_string_is_at_most_a_third_of_the_json_map_it_replaces() -> None:
    h = _history(2)
    text = wire.encode(h)
    as_map = json.dumps(h.to_dict(), separators=(",", ":"))
    assert len(text) * 3 <= len(as_map), (len(text), len(as_map), text)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), mu=st.floats(-4.0, 1.0), mem=st.floats(2e7, 8e9))
def test_any_history_round_trips_to_the_same_recommendation_within_one_bucket(seed: int, mu: float, mem: float) -> None:
    h = _history(seed, days=1, cpu_mu=mu, mem=mem)
    a, b = recommend(h, S, 1), recommend(wire.decode(S, wire.encode(h)), S, 1)
    for x, y in ((a.target.cpu_milli, b.target.cpu_milli), (a.target.memory, b.target.memory)):
        assert x is not None and y is not None
        assert max(x, y) <= min(x, y) * 1.05 + 1  # at most one bucket (5 %) and the rounding


def test_an_empty_history_round_trips() -> None:
    back = wire.decode(S, wire.encode(ContainerHistory(S)))
    assert back.cpu.is_empty() and back.memory.is_empty() and back.samples == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (42, "not a history string"),
        ("x" * (wire.MAX_CHARS + 1), "not a history string"),
        ("{not json", "not JSON"),
        ("[2, [0, 0, []], [0, 0, []], null, null, 0, 0, null]", "not a version 1 history"),
        ("[1, [0, 0, []]]", "not a version 1 history"),
        ("[1, [0, 0, [1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: not [reference"),
        ("[1, [0, 0, 99999, [1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: buckets 99999+1 out of range"),
        ("[1, [0, 0, 0, [1, -1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: weight -1"),
        ("[1, [0, 0, true, [1]], [0, 0, 0, []], null, null, 0, 0, null]", "cpu: buckets True"),
        ('[1, [0, 0, 0, []], [0, 0, 0, []], "x", null, 0, 0, null]', "first_sample must be a number"),
        ("[1, [0, 0, 0, []], [0, 0, 0, []], null, null, -3, 0, null]", "samples must be a non-negative integer"),
        ("[1, [0, 0, 0, []], [0, 0, 0, [1, 1e999]], null, null, 0, 0, null]", "memory weight must be a number"),
    ],
)
def test_what_a_node_could_have_written_is_refused_with_a_reason(text: object, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        wire.decode(S, text)
