"""What a soak reports: the result of one run and the figures drawn from what was watched (the daemon's
samples, its log), each over the first and the last tenth of the event phase so a drift shows against
a noisy window."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.stats import percentile
from tests.daemon.harness import Daemon

MIB = 1 << 20


@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles of one window, in milliseconds (None when the window has no sample)."""

    n: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, ms: Sequence[float]) -> Percentiles:
        if not ms:
            return cls(0, None, None, None, None)
        return cls(len(ms), *(round(percentile(ms, q), 2) for q in (50, 95, 99, 100)))


@dataclass(frozen=True)
class Windows:
    """The same latency over the first and the last tenth of the event phase, and the median and p99 of
    every tenth (to tell a drift from a noisy window)."""

    first: Percentiles
    last: Percentiles
    p50_by_tenth_ms: tuple[float | None, ...]
    p99_by_tenth_ms: tuple[float | None, ...]

    @classmethod
    def of(cls, timed: Sequence[tuple[float, float]], duration_s: float) -> Windows:
        """`timed`: (seconds into the event phase, latency in ms); a time past the end counts in the last."""
        window = duration_s / 10
        tenths = [
            Percentiles.of([ms for t, ms in timed if t >= 0 and min(int(t / window), 9) == i]) for i in range(10)
        ]
        return cls(tenths[0], tenths[-1], tuple(p.p50_ms for p in tenths), tuple(p.p99_ms for p in tenths))


@dataclass(frozen=True)
class Sample:
    """The daemon process at one instant (psutil), and whether /healthz answered 200."""

    t_s: float  # seconds into the event phase (negative: before it, from the daemon's start)
    rss_bytes: int
    fds: int
    threads: int
    children: int
    cpu_s: float
    healthy: bool


@dataclass(frozen=True)
class SoakResult:
    """Every figure of one run; `to_json` for the runner's report."""

    pods: int
    events: int
    duration_s: float
    seed: int
    faults: bool
    # what was sent
    events_sent: int
    events_by_kind: Mapping[str, int]
    send_lag_max_s: float  # how late against its schedule the latest event went out
    faults_injected: int
    faults_by_kind: Mapping[str, int]
    faults_unconsumed: int  # armed but never hit (a list fault with no relist after it)
    # correctness, once the faults stopped and the node converged
    pods_checked: int
    containers_checked: int
    resizes_checked: int  # live pods resized during the run, their latest resize compared with the files
    resizes_lost: int  # live pods whose files still differ from their spec
    lost_samples: tuple[str, ...]
    probes: int
    probes_unresolved: int
    violations: int
    violation_samples: tuple[str, ...]
    crashes: int  # "reconcile.crashed" lines
    raw_lines: int  # log lines that are not JSON (a traceback)
    healthz_failures: int  # samples where /healthz did not answer 200
    healthz_end: int
    exit_code: int | None
    # the daemon process: first and last tenth of the event phase
    window_s: float
    rss_first_mib: float
    rss_last_mib: float
    rss_max_mib: float
    rss_growth_pct: float
    fds_first: int
    fds_last: int
    threads_first: int
    threads_last: int
    children_first: int
    children_last: int
    cpu_percent: float  # the daemon's CPU over the event phase, % of one core
    harness_cpu_percent: float  # this process's (API server, CRI server, kubelet's part, probes), same span
    # latency
    apply_latency: Windows  # cluster.apply -> the node's files show the spec (probed resizes)
    reconcile_pod: Windows  # the daemon's own "reconcile" duration_ms, pod passes
    reconcile_tiers: Windows  # the same, tier passes
    # time
    startup_s: float  # daemon start -> every pod's files at its spec
    converge_s: float  # faults stopped -> every live pod's files at its spec
    wall_s: float
    samples: tuple[Sample, ...] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["events_by_kind"] = dict(self.events_by_kind)
        out["faults_by_kind"] = dict(self.faults_by_kind)
        return out


def log_figures(daemon: Daemon, wall0: float, duration_s: float) -> tuple[Windows, Windows, int, int]:
    """From the daemon's log: reconcile durations per scope and window, crashes, non-JSON lines."""
    timed: dict[str, list[tuple[float, float]]] = {"pod": [], "tiers": []}
    crashes = raw = 0
    for line in daemon.lines():
        if "raw" in line:
            raw += 1
        elif line.get("event") == "reconcile.crashed":
            crashes += 1
        elif line.get("event") == "reconcile" and "duration_ms" in line and line.get("scope") in timed:
            t = datetime.fromisoformat(line["timestamp"]).timestamp() - wall0
            timed[line["scope"]].append((t, float(line["duration_ms"])))
    return Windows.of(timed["pod"], duration_s), Windows.of(timed["tiers"], duration_s), crashes, raw


def resource_figures(samples: Sequence[Sample], duration_s: float) -> dict[str, Any]:
    """RSS at the end of the first tenth and at the end; descriptor/thread/children maxima per tenth."""
    window = duration_s / 10
    during = [s for s in samples if 0 <= s.t_s <= duration_s] or list(samples)
    first = [s for s in during if s.t_s <= window] or during[:1]
    last = [s for s in during if s.t_s >= duration_s - window] or during[-1:]
    rss_first, rss_last = first[-1].rss_bytes, last[-1].rss_bytes
    cpu = (during[-1].cpu_s - during[0].cpu_s) / max(during[-1].t_s - during[0].t_s, 1e-9)
    return {
        "window_s": round(window, 2),
        "rss_first_mib": round(rss_first / MIB, 2),
        "rss_last_mib": round(rss_last / MIB, 2),
        "rss_max_mib": round(max(s.rss_bytes for s in during) / MIB, 2),
        "rss_growth_pct": round(100 * (rss_last - rss_first) / rss_first, 2),
        "fds_first": max(s.fds for s in first),
        "fds_last": max(s.fds for s in last),
        "threads_first": max(s.threads for s in first),
        "threads_last": max(s.threads for s in last),
        "children_first": max(s.children for s in first),
        "children_last": max(s.children for s in last),
        "cpu_percent": round(100 * cpu, 2),
        "healthz_failures": sum(not s.healthy for s in samples),
    }
