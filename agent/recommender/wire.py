"""A container history as a node publishes it for the merge: one compact string per container (what the
merge reads, nothing the node needs only to keep sampling), so that a node's NodeHistory object stays small
in etcd — about 7 bytes a histogram bucket instead of about 30 as a JSON map, and one managed field per
container instead of one per bucket. Pure.

The string is a JSON array: `[1, cpu, memory, first_sample, last_sample, samples, ooms, last_seen]`, each
histogram `[reference, total, first bucket, [weight, weight, ...]]`, the weights of the buckets from the first
one with weight on (a bucket without weight in between is 0: usage fills neighbouring buckets, so this is
shorter than bucket-weight pairs). Weights keep 5 significant digits (a relative error of 5e-5; VPA's own
checkpoints keep weights as integers up to 10,000).
"""

from __future__ import annotations

import json
import math
from typing import Final

from agent.recommender.config import RecommenderSettings
from agent.recommender.histogram import DecayingHistogram, ExponentialOptions
from agent.recommender.model import ContainerHistory

VERSION: Final = 1
MAX_CHARS: Final = 64 * 1024  # a container's string; anything longer is not one this project wrote


def _num(v: float) -> float | int:
    """5 significant digits, as short as JSON can say them."""
    if v == 0 or not math.isfinite(v):
        return 0
    out = float(f"{v:.5g}")
    return int(out) if out.is_integer() and abs(out) < 1e15 else out


def _hist(h: DecayingHistogram) -> list[object]:
    held = sorted(b for b, w in h.hist.weights.items() if w > 0)
    if not held:
        return [h.reference, _num(h.hist.total), 0, []]
    return [h.reference, _num(h.hist.total), held[0], [_num(h.hist.weights.get(b, 0.0)) for b in range(held[0], held[-1] + 1)]]


def encode(h: ContainerHistory) -> str:
    return json.dumps([VERSION, _hist(h.cpu), _hist(h.memory), h.first_sample, h.last_sample, h.samples, h.ooms, h.last_seen],
                      separators=(",", ":"))


def _opt(v: object, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{what} must be a number")
    return float(v)


def _count(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{what} must be a non-negative integer")
    return v


def _decode_hist(options: ExponentialOptions, half_life_s: float, raw: object, what: str) -> DecayingHistogram:
    if not isinstance(raw, list) or len(raw) != 4 or not isinstance(raw[3], list):
        raise ValueError(f"{what}: not [reference, total, first bucket, [weight, ...]]")
    first, raw_weights = raw[2], raw[3]
    if isinstance(first, bool) or not isinstance(first, int) or first < 0 or first + len(raw_weights) > options.num_buckets:
        raise ValueError(f"{what}: buckets {first!r}+{len(raw_weights)} out of range")
    weights: dict[int, float] = {}
    for i, w in enumerate(raw_weights):
        weight = _opt(w, f"{what} weight")
        if weight is None or weight < 0:
            raise ValueError(f"{what}: weight {w!r} is not a non-negative number")
        if weight > 0:
            weights[first + i] = weight
    total = _opt(raw[1], f"{what} total")
    return DecayingHistogram.restored(options, half_life_s, _opt(raw[0], f"{what} reference"), weights,
                                      total if total is not None and total >= 0 else None)


def decode(settings: RecommenderSettings, text: object) -> ContainerHistory:
    """The history a node published; ValueError says what is wrong (a bad entry is skipped by the merge,
    never trusted: any agent's token can write its own node's object)."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        raise ValueError("not a history string of at most 64 KiB")
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(raw, list) or len(raw) != 8 or raw[0] != VERSION:
        raise ValueError(f"not a version {VERSION} history")
    h = ContainerHistory(settings)
    h.cpu = _decode_hist(settings.cpu_options, settings.cpu_histogram_decay_half_life_s, raw[1], "cpu")
    h.memory = _decode_hist(settings.memory_options, settings.memory_histogram_decay_half_life_s, raw[2], "memory")
    h.first_sample, h.last_sample = _opt(raw[3], "first_sample"), _opt(raw[4], "last_sample")
    h.samples, h.ooms = _count(raw[5], "samples"), _count(raw[6], "ooms")
    h.last_seen = _opt(raw[7], "last_seen")
    return h
