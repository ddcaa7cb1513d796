"""The containers' usage on the agent nodes' fake cgroup trees, so that the recommender's sampler has
something to sample: each container's `cpuacct.usage` (nanoseconds, cumulative) advanced about every
second at a rate that varies around a base of its own, and a working set (`memory.usage_in_bytes` less
`memory.stat`'s `total_inactive_file`) fixed per container. The files are the v1 ones the sampler reads
(agent/recommender/counters.py V1_FILES; nodes.py creates those the strict fake tree lacks).

The base: half the container's CPU request (20m without one), a working set of 60 % of its memory request
(48 MiB without one), each scaled by a factor of 0.7-1.3 of the pod's own, so that the pods of one workload
differ as real ones do; each second's CPU rate is the base times a log-normal factor (σ 0.35: about half to
twice the base), so that the CPU histograms fill the buckets a real container's would. Usage below the
requests: a recommendation then falls around the requests and the actuator has nothing to change (but a
pod's minimum memory shared by its containers, VPA's rule, can raise a small sidecar's request once).

Cheap: one pwrite per container a second (about 6 µs with its open and close), only on the nodes whose
agent runs. The pure parts are `base_usage`, `inactive_of`, `memory_stat` and `Counter.advance`.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CPU_SHARE: Final = 0.5  # of the CPU request
MEMORY_SHARE: Final = 0.6  # of the memory request, as the working set
NO_REQUEST_CORES: Final = 0.02
NO_REQUEST_BYTES: Final = 48 << 20
SIGMA: Final = 0.35  # each second's CPU rate: base × exp(σ·N(0, 1))
INACTIVE_SHARE: Final = 0.1  # of the usage: page cache a working set leaves out
PERIOD_S: Final = 1.0


def _spread(*parts: str) -> float:
    """A factor in [0.7, 1.3), fixed per pod (and container)."""
    h = int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:8], 16)
    return 0.7 + 0.6 * h / 2**32


def base_usage(pod: str, container: str, cpu_request_milli: int | None, memory_request: int | None) -> tuple[float, int]:
    """(CPU cores, working set bytes) the container uses on average."""
    cores = cpu_request_milli / 1000 * CPU_SHARE if cpu_request_milli else NO_REQUEST_CORES
    ws = memory_request * MEMORY_SHARE if memory_request else NO_REQUEST_BYTES
    f = _spread(pod, container)
    return round(cores * f, 6), int(ws * f)


def inactive_of(working_set: int) -> int:
    """The inactive file pages beside a working set: usage = working set + inactive."""
    return int(working_set * INACTIVE_SHARE / (1 - INACTIVE_SHARE))


def memory_stat(usage: int, inactive: int) -> str:
    """A v1 memory.stat with the lines the sampler and a reader of it look for (the kernel prints more)."""
    rss = usage - inactive
    lines = [("cache", inactive), ("rss", rss), ("mapped_file", 0), ("inactive_anon", 0), ("active_anon", rss),
             ("inactive_file", inactive), ("active_file", 0), ("unevictable", 0),
             ("total_cache", inactive), ("total_rss", rss), ("total_inactive_anon", 0), ("total_active_anon", rss),
             ("total_inactive_file", inactive), ("total_active_file", 0), ("total_unevictable", 0)]
    return "".join(f"{k} {v}\n" for k, v in lines)


OOM_CONTROL: Final = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"


@dataclass
class Counter:
    """One container's cpuacct.usage: its path, its base rate, its total so far; and which container it is
    as the recommender's sampler names it (`pod` "namespace/name", `container`), with its working set, so
    that a history seeded for it (nodes.seeded_state) draws from the same usage."""

    path: Path
    cores: float
    total_ns: int = 0
    pod: str = ""
    container: str = ""
    working_set: int = 0

    def advance(self, dt_s: float, factor: float) -> int:
        """The total after `dt_s` seconds at the base rate times `factor`; a counter never goes back."""
        self.total_ns += max(0, int(self.cores * factor * dt_s * 1e9))
        return self.total_ns


def factor(rng: random.Random) -> float:
    return math.exp(SIGMA * rng.gauss(0.0, 1.0))


class Updater(threading.Thread):
    """Advances the counters of the nodes added (those whose agent runs) every PERIOD_S. A counter's file
    only grows, so each write overwrites the previous digits in place (pwrite at 0, no truncation: a reader
    never sees it empty)."""

    def __init__(self, period_s: float = PERIOD_S, seed: int = 41) -> None:
        super().__init__(name="usage", daemon=True)
        self.period = period_s
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._counters: list[Counter] = []
        self.errors: list[str] = []
        self.passes = 0
        self.cpu_s = 0.0

    def add(self, counters: list[Counter]) -> None:
        with self._lock:
            self._counters.extend(counters)

    def __len__(self) -> int:
        return len(self._counters)

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(max(0.0, last + self.period - time.monotonic())):
            now = time.monotonic()
            dt, last = now - last, now
            t0 = time.thread_time()
            with self._lock:
                counters = list(self._counters)
            for c in counters:
                total = c.advance(dt, factor(self.rng))
                try:
                    fd = os.open(c.path, os.O_WRONLY)
                    try:
                        os.pwrite(fd, b"%d\n" % total, 0)
                    finally:
                        os.close(fd)
                except OSError as err:
                    if len(self.errors) < 5:
                        self.errors.append(f"{c.path}: {err}")
            self.passes += 1
            self.cpu_s += time.thread_time() - t0
