"""VPA's decaying exponential-bucket histogram, exactly (kubernetes/autoscaler vertical-pod-autoscaler
pkg/recommender/util/{histogram,histogram_options,decaying_histogram}.go), so that the node's numbers are
comparable with the VPA recommender's. Pure: timestamps are UNIX seconds passed in.

Buckets: bucket i starts at firstBucketSize * (ratio^i - 1) / (ratio - 1); a percentile is the END of the
bucket where the cumulative weight first reaches percentile * total (the start of the next bucket). A
decaying histogram weighs a sample at time t by 2^((t - reference) / halfLife), so older samples count less
relative to newer ones; the reference moves forward (and every weight is scaled down) once the exponent
would pass 100, and two histograms with a common reference simply add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_DECAY_EXPONENT = 100  # decaying_histogram.go maxDecayExponent
GO_ZERO_TIME_OFFSET_S = 62_135_596_800  # seconds from Go's zero time (year 1) to the UNIX epoch: time.Round's origin


@dataclass(frozen=True, slots=True)
class ExponentialOptions:
    """histogram_options.go NewExponentialHistogramOptions."""

    max_value: float
    first_bucket_size: float
    ratio: float
    epsilon: float
    num_buckets: int = field(init=False)
    # math.log(x, ratio) is log(x) / log(ratio); the divisor, computed once, gives the same bucket
    log_ratio: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.ratio <= 1 or self.epsilon <= 0:
            raise ValueError("maxValue, firstBucketSize and epsilon must be > 0, ratio must be > 1")
        n = math.ceil(math.log(self.max_value * (self.ratio - 1) / self.first_bucket_size + 1, self.ratio)) + 1
        object.__setattr__(self, "num_buckets", n)
        object.__setattr__(self, "log_ratio", math.log(self.ratio))

    def find_bucket(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        bucket = int(math.log(value * (self.ratio - 1) / self.first_bucket_size + 1) / self.log_ratio)
        return min(bucket, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if not 0 <= bucket < self.num_buckets:
            raise IndexError(f"bucket {bucket} out of range [0..{self.num_buckets - 1}]")
        if bucket == 0:
            return 0.0
        return self.first_bucket_size * (self.ratio**bucket - 1) / (self.ratio - 1)


@dataclass(slots=True)
class Histogram:
    """histogram.go: bucket weights, their total, and the range of buckets holding at least epsilon."""

    options: ExponentialOptions
    weights: dict[int, float] = field(default_factory=dict)
    total: float = 0.0
    min_bucket: int = -1  # -1: empty (histogram.go starts min at the last bucket and max at 0)
    max_bucket: int = -1

    def _lo(self) -> int:
        return self.options.num_buckets - 1 if self.min_bucket < 0 else self.min_bucket

    def _hi(self) -> int:
        return 0 if self.max_bucket < 0 else self.max_bucket

    def add(self, value: float, weight: float) -> None:
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        options = self.options
        b = options.find_bucket(value)
        w = self.weights[b] = self.weights.get(b, 0.0) + weight
        self.total += weight
        lo = options.num_buckets - 1 if self.min_bucket < 0 else self.min_bucket  # _lo(), _hi() inline:
        hi = 0 if self.max_bucket < 0 else self.max_bucket  # this runs for every sample
        if b < lo and w >= options.epsilon:
            lo = b
        if b > hi and w >= options.epsilon:
            hi = b
        self.min_bucket, self.max_bucket = lo, hi

    def subtract(self, value: float, weight: float) -> None:
        b = self.options.find_bucket(value)
        eps = self.options.epsilon
        self.total = _safe_subtract(self.total, weight, eps)
        self.weights[b] = _safe_subtract(self.weights.get(b, 0.0), weight, eps)
        self._update_range()

    def _update_range(self) -> None:
        eps = self.options.epsilon
        last = self.options.num_buckets - 1
        lo, hi = self._lo(), self._hi()
        while self.weights.get(lo, 0.0) < eps and lo < last:
            lo += 1
        while self.weights.get(hi, 0.0) < eps and hi > 0:
            hi -= 1
        self.min_bucket, self.max_bucket = lo, hi

    def is_empty(self) -> bool:
        return self.weights.get(self._lo(), 0.0) < self.options.epsilon

    def percentile(self, p: float) -> float:
        if self.is_empty():
            return 0.0
        threshold = p * self.total
        partial = 0.0
        bucket = self._lo()
        hi = self._hi()
        while bucket < hi:
            partial += self.weights.get(bucket, 0.0)
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self.options.num_buckets - 1:
            return self.options.bucket_start(bucket + 1)
        return self.options.bucket_start(bucket)

    def scale(self, factor: float) -> None:
        for b in list(self.weights):
            self.weights[b] *= factor
        self.total *= factor
        self._update_range()

    def merge(self, other: Histogram) -> None:
        if self.options != other.options:
            raise ValueError("cannot merge histograms with different options")
        for b, w in other.weights.items():
            self.weights[b] = self.weights.get(b, 0.0) + w
        self.total += other.total
        if other.min_bucket >= 0:  # histogram.go Merge: the union of both ranges
            self.min_bucket = min(self._lo(), other._lo())
            self.max_bucket = max(self._hi(), other._hi())


def _safe_subtract(value: float, sub: float, epsilon: float) -> float:
    value -= sub
    return 0.0 if value < epsilon else value


@dataclass(slots=True)
class DecayingHistogram:
    """decaying_histogram.go; `reference` is UNIX seconds (None = Go's zero time: nothing added yet)."""

    options: ExponentialOptions
    half_life_s: float
    hist: Histogram = field(init=False)
    reference: float | None = None

    def __post_init__(self) -> None:
        self.hist = Histogram(self.options)

    def _round_reference(self, t: float) -> float:
        # Go: newReference = t.Round(halfLife), rounding half up from the zero time (year 1)
        since_zero = t + GO_ZERO_TIME_OFFSET_S
        return math.floor(since_zero / self.half_life_s + 0.5) * self.half_life_s - GO_ZERO_TIME_OFFSET_S

    def _shift(self, t: float) -> None:
        new_ref = self._round_reference(t)
        old_ref = self.reference if self.reference is not None else -GO_ZERO_TIME_OFFSET_S
        exponent = math.floor((old_ref - new_ref) / self.half_life_s + 0.5)
        self.hist.scale(math.ldexp(1.0, exponent))
        self.reference = new_ref

    def _decay_factor(self, t: float) -> float:
        ref = self.reference if self.reference is not None else -GO_ZERO_TIME_OFFSET_S
        if t > ref + self.half_life_s * MAX_DECAY_EXPONENT:
            self._shift(t)
            ref = self.reference if self.reference is not None else ref
        return float(math.exp2((t - ref) / self.half_life_s))

    def add(self, value: float, weight: float, t: float) -> None:
        ref = self.reference
        if ref is None or t > ref + self.half_life_s * MAX_DECAY_EXPONENT:  # else _decay_factor's math, inline
            self.hist.add(value, weight * self._decay_factor(t))
            return
        self.hist.add(value, weight * float(math.exp2((t - ref) / self.half_life_s)))

    def subtract(self, value: float, weight: float, t: float) -> None:
        self.hist.subtract(value, weight * self._decay_factor(t))

    def percentile(self, p: float) -> float:
        return self.hist.percentile(p)

    def is_empty(self) -> bool:
        return self.hist.is_empty()

    def merge(self, other: DecayingHistogram) -> None:
        """Histograms with a common reference time add; the older reference is shifted to the newer first."""
        if self.half_life_s != other.half_life_s:
            raise ValueError("cannot merge decaying histograms with different half-lives")
        other = other.copy()
        if other.reference is not None and (self.reference is None or self.reference < other.reference):
            self._shift(other.reference)
        elif self.reference is not None and (other.reference is None or other.reference < self.reference):
            other._shift(self.reference)
        self.hist.merge(other.hist)

    def copy(self) -> DecayingHistogram:
        out = DecayingHistogram(self.options, self.half_life_s, self.reference)
        out.hist = Histogram(self.options, dict(self.hist.weights), self.hist.total, self.hist.min_bucket, self.hist.max_bucket)
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "reference": self.reference,
            "total": self.hist.total,
            "weights": {str(b): w for b, w in sorted(self.hist.weights.items()) if w > 0},
        }

    @classmethod
    def restored(cls, options: ExponentialOptions, half_life_s: float, reference: float | None,
                 weights: dict[int, float], total: float | None) -> DecayingHistogram:
        """A histogram from its saved parts (checked by the caller); a total not saved is the weights' sum."""
        out = cls(options, half_life_s, reference)
        out.hist.weights = weights
        out.hist.total = total if total is not None else sum(weights.values())
        if weights:
            out.hist.min_bucket, out.hist.max_bucket = min(weights), max(weights)
            out.hist._update_range()
        return out

    @classmethod
    def from_dict(cls, options: ExponentialOptions, half_life_s: float, data: dict[str, object]) -> DecayingHistogram:
        ref = data.get("reference")
        weights = data.get("weights")
        if not isinstance(weights, dict):
            raise ValueError("weights must be a map of bucket to weight")
        parsed: dict[int, float] = {}
        for b, w in weights.items():
            bucket = int(b)
            if not 0 <= bucket < options.num_buckets or not isinstance(w, int | float) or w < 0:
                raise ValueError(f"bad bucket {b!r}: {w!r}")
            parsed[bucket] = float(w)
        total = data.get("total")
        return cls.restored(options, half_life_s, float(ref) if isinstance(ref, int | float) else None, parsed,
                            float(total) if isinstance(total, int | float) else None)
