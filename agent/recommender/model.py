"""One container's usage history as VPA's recommender keeps it (model/container.go ContainerState and
model/aggregate_container_state.go AggregateContainerState, one per container here): CPU samples with a
constant weight, memory as the PEAK of each aggregation interval (a higher sample within the interval
replaces the interval's peak), OOMs as a bumped memory sample. Pure; times are UNIX seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent.recommender.config import MIN_SAMPLE_WEIGHT, RecommenderSettings
from agent.recommender.histogram import DecayingHistogram


@dataclass(slots=True)
class ContainerHistory:
    settings: RecommenderSettings
    cpu: DecayingHistogram = field(init=False)
    memory: DecayingHistogram = field(init=False)
    first_sample: float | None = None  # of CPU samples: the confidence's lifespan
    last_sample: float | None = None
    samples: int = 0  # CPU samples counted (TotalSamplesCount)
    last_cpu_start: float | None = None
    last_memory_start: float | None = None
    window_end: float | None = None  # end of the current memory aggregation interval
    memory_peak: float = 0.0
    oom_peak: float = 0.0
    last_seen: float | None = None  # any sample: a container gone longer than the memory window is dropped
    ooms: int = 0

    def __post_init__(self) -> None:
        s = self.settings
        self.cpu = DecayingHistogram(s.cpu_options, s.cpu_histogram_decay_half_life_s)
        self.memory = DecayingHistogram(s.memory_options, s.memory_histogram_decay_half_life_s)

    def _seen(self, t: float) -> None:
        self.last_seen = t if self.last_seen is None else max(self.last_seen, t)

    def add_cpu(self, t: float, cores: float) -> bool:
        """container.go addCPUSample: invalid, duplicate or out-of-order samples are discarded."""
        if cores < 0 or not math.isfinite(cores) or (self.last_cpu_start is not None and t <= self.last_cpu_start):
            return False
        self.cpu.add(cores, MIN_SAMPLE_WEIGHT, t)  # constant weight since VPA 1.4.0
        self.last_cpu_start = t
        # max() and min() and _seen() spelled out: this runs for every container every second
        if self.last_sample is None or t > self.last_sample:
            self.last_sample = t
        if self.first_sample is None or t < self.first_sample:
            self.first_sample = t
        self.samples += 1
        if self.last_seen is None or t > self.last_seen:
            self.last_seen = t
        return True

    def add_memory(self, t: float, used: float, oom: bool = False) -> bool:
        """container.go addMemorySample: one sample per aggregation interval, its peak."""
        if used < 0 or not math.isfinite(used) or (not oom and self.last_memory_start is not None and t < self.last_memory_start):
            return False
        self.last_memory_start = t
        if self.window_end is None:
            self.window_end = t
        add_new_peak = False
        if t < self.window_end:
            old_max = self.oom_peak if self.oom_peak > self.memory_peak else self.memory_peak  # max()
            if old_max != 0 and used > old_max:
                self.memory.subtract(old_max, 1.0, self.window_end)
                add_new_peak = True
        else:
            interval = self.settings.memory_aggregation_interval_s
            shift = math.floor((t - self.window_end) / interval) * interval + interval
            self.window_end += shift
            self.memory_peak = 0.0
            self.oom_peak = 0.0
            add_new_peak = True
        if add_new_peak:
            self.memory.add(used, 1.0, self.window_end)
            if oom:
                self.oom_peak = used
            else:
                self.memory_peak = used
        if self.last_seen is None or t > self.last_seen:
            self.last_seen = t
        return True

    def record_oom(self, t: float, requested_memory: float) -> bool:
        """container.go RecordOOM: a memory sample max(used + minBumpUp, used × ratio), used = max(request,
        the current interval's peak); an OOM older than one interval before the last sample is dropped."""
        interval = self.settings.memory_aggregation_interval_s
        if self.last_memory_start is not None and t < self.last_memory_start - interval:
            return False
        used = max(requested_memory, self.memory_peak)
        needed = max(used + self.settings.oom_min_bump_up_bytes, used * self.settings.oom_bump_up_ratio)
        if self.add_memory(t, float(int(needed)), oom=True):
            self.ooms += 1
            return True
        return False

    def to_dict(self) -> dict[str, object]:
        return {
            "cpu": self.cpu.to_dict(),
            "memory": self.memory.to_dict(),
            "first_sample": self.first_sample,
            "last_sample": self.last_sample,
            "samples": self.samples,
            "last_cpu_start": self.last_cpu_start,
            "last_memory_start": self.last_memory_start,
            "window_end": self.window_end,
            "memory_peak": self.memory_peak,
            "oom_peak": self.oom_peak,
            "last_seen": self.last_seen,
            "ooms": self.ooms,
        }

    @classmethod
    def from_dict(cls, settings: RecommenderSettings, data: dict[str, object]) -> ContainerHistory:
        h = cls(settings)
        cpu, memory = data.get("cpu"), data.get("memory")
        if not isinstance(cpu, dict) or not isinstance(memory, dict):
            raise ValueError("cpu and memory histograms are missing")
        h.cpu = DecayingHistogram.from_dict(settings.cpu_options, settings.cpu_histogram_decay_half_life_s, cpu)
        h.memory = DecayingHistogram.from_dict(settings.memory_options, settings.memory_histogram_decay_half_life_s, memory)

        def num(key: str) -> float | None:
            v = data.get(key)
            if v is None:
                return None
            if not isinstance(v, int | float) or isinstance(v, bool):
                raise ValueError(f"{key} must be a number")
            return float(v)

        h.first_sample, h.last_sample = num("first_sample"), num("last_sample")
        h.last_cpu_start, h.last_memory_start = num("last_cpu_start"), num("last_memory_start")
        h.window_end, h.last_seen = num("window_end"), num("last_seen")
        h.memory_peak, h.oom_peak = num("memory_peak") or 0.0, num("oom_peak") or 0.0
        h.samples = int(num("samples") or 0)
        h.ooms = int(num("ooms") or 0)
        return h

    def merge(self, other: ContainerHistory) -> None:
        """aggregate_container_state.go MergeContainerState: histograms add (common reference), the sample
        span is the union, counts add."""
        self.cpu.merge(other.cpu)
        self.memory.merge(other.memory)
        if other.first_sample is not None:
            self.first_sample = other.first_sample if self.first_sample is None else min(self.first_sample, other.first_sample)
        if other.last_sample is not None:
            self.last_sample = other.last_sample if self.last_sample is None else max(self.last_sample, other.last_sample)
        self.samples += other.samples
        self.ooms += other.ooms
        if other.last_seen is not None:
            self._seen(other.last_seen)
