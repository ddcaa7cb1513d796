"""A container history as a node publishes it for the merge: one compact string per container (what the
merge reads, nothing the node needs only to keep sampling), so that a node's NodeHistory object stays small
in etcd — about 4.5 bytes a histogram bucket instead of about 30 as a JSON map, and one managed field per
container instead of one per bucket. Pure.

The string is a JSON array: `[2, cpu, memory, first_sample, last_sample, samples, ooms, last_seen]`, each
histogram `[reference, total, first bucket, [weight, weight, ...]]`: the weights of the buckets from the
first one with weight on (a bucket without weight in between is 0: usage fills neighbouring buckets, so this
is shorter than bucket-weight pairs), as integers scaled so that the largest is 10,000 and the total weight
beside them, as VPA's own checkpoints keep a histogram (util/histogram.go: SaveToChekpoint scales to
MaxCheckpointWeight and drops the buckets that round to 0; LoadFromCheckpoint gives each bucket
total × weight / the weights' sum). A bucket's weight is kept to about 1/20,000 of the largest one's: what
the percentiles read, and no number longer than 5 digits. Times are written exactly.

Version 1 wrote each weight itself to 5 significant digits (about 6.5 bytes a bucket: version 2 makes a
container's string about a quarter shorter); a NodeHistory written by a node not yet upgraded still holds
such strings, and they are read as they were.
"""

from __future__ import annotations

import json
import math
from typing import Final

from agent.recommender.config import RecommenderSettings
from agent.recommender.histogram import DecayingHistogram, ExponentialOptions
from agent.recommender.model import ContainerHistory

VERSION: Final = 2
READS: Final = (1, 2)  # the versions decode reads: 1 from nodes not yet upgraded
MAX_WEIGHT: Final = 10_000  # VPA's MaxCheckpointWeight: the largest bucket's weight as written
MAX_CHARS: Final = 64 * 1024  # a container's string; anything longer is not one this project wrote


def _num(v: float) -> float | int:
    """5 significant digits, as short as JSON can say them."""
    if v == 0 or not math.isfinite(v):
        return 0
    out = float(f"{v:.5g}")
    return int(out) if out.is_integer() and abs(out) < 1e15 else out


def _time(v: float | None) -> float | int | None:
    """A time exactly, without the `.0` of a whole second."""
    return int(v) if v is not None and v.is_integer() else v


def _hist(h: DecayingHistogram) -> list[object]:
    top = max(h.hist.weights.values(), default=0.0)
    scaled = {b: int(w / top * MAX_WEIGHT + 0.5) for b, w in h.hist.weights.items() if w > 0} if top > 0 else {}
    held = sorted(b for b, n in scaled.items() if n > 0)
    if not held:
        return [_time(h.reference), _num(h.hist.total), 0, []]
    return [_time(h.reference), _num(h.hist.total), held[0], [scaled.get(b, 0) for b in range(held[0], held[-1] + 1)]]


def encode(h: ContainerHistory) -> str:
    return json.dumps([VERSION, _hist(h.cpu), _hist(h.memory), _time(h.first_sample), _time(h.last_sample), h.samples,
                       h.ooms, _time(h.last_seen)], separators=(",", ":"))


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


def _weights_v1(first: int, raw_weights: list[object], what: str) -> dict[int, float]:
    weights: dict[int, float] = {}
    for i, w in enumerate(raw_weights):
        weight = _opt(w, f"{what} weight")
        if weight is None or weight < 0:
            raise ValueError(f"{what}: weight {w!r} is not a non-negative number")
        if weight > 0:
            weights[first + i] = weight
    return weights


def _weights_v2(first: int, raw_weights: list[object], total: float | None, what: str) -> dict[int, float]:
    for w in raw_weights:
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= MAX_WEIGHT:
            raise ValueError(f"{what}: weight {w!r} is not an integer in [0, {MAX_WEIGHT}]")
    scaled = {first + i: w for i, w in enumerate(raw_weights) if isinstance(w, int) and w > 0}
    if not scaled:
        return {}
    if total is None or total <= 0:
        raise ValueError(f"{what}: weights without a total above zero")
    ratio = total / sum(scaled.values())
    return {b: n * ratio for b, n in scaled.items()}


def _decode_hist(version: int, options: ExponentialOptions, half_life_s: float, raw: object, what: str) -> DecayingHistogram:
    if not isinstance(raw, list) or len(raw) != 4 or not isinstance(raw[3], list):
        raise ValueError(f"{what}: not [reference, total, first bucket, [weight, ...]]")
    first, raw_weights = raw[2], raw[3]
    if isinstance(first, bool) or not isinstance(first, int) or first < 0 or first + len(raw_weights) > options.num_buckets:
        raise ValueError(f"{what}: buckets {first!r}+{len(raw_weights)} out of range")
    raw_total = _opt(raw[1], f"{what} total")
    total = raw_total if raw_total is not None and raw_total >= 0 else None
    weights = _weights_v1(first, raw_weights, what) if version == 1 else _weights_v2(first, raw_weights, total, what)
    return DecayingHistogram.restored(options, half_life_s, _opt(raw[0], f"{what} reference"), weights, total)


def decode(settings: RecommenderSettings, text: object) -> ContainerHistory:
    """The history a node published (in any version of READS); ValueError says what is wrong (a bad entry is
    skipped by the merge, never trusted: any agent's token can write its own node's object)."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        raise ValueError("not a history string of at most 64 KiB")
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(raw, list) or len(raw) != 8 or not isinstance(raw[0], int) or isinstance(raw[0], bool) or raw[0] not in READS:
        raise ValueError(f"not a version {' or '.join(map(str, READS))} history")
    version: int = raw[0]
    h = ContainerHistory(settings)
    h.cpu = _decode_hist(version, settings.cpu_options, settings.cpu_histogram_decay_half_life_s, raw[1], "cpu")
    h.memory = _decode_hist(version, settings.memory_options, settings.memory_histogram_decay_half_life_s, raw[2], "memory")
    h.first_sample, h.last_sample = _opt(raw[3], "first_sample"), _opt(raw[4], "last_sample")
    h.samples, h.ooms = _count(raw[5], "samples"), _count(raw[6], "ooms")
    h.last_seen = _opt(raw[7], "last_seen")
    return h
