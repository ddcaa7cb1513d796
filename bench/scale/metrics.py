"""What the harness reads off processes and the API server: a process's RSS and CPU time from /proc, and
the Prometheus text of the API server's and etcd's /metrics, parsed into samples, differenced between
two scrapes and read as rates, sums by label and histogram quantiles (pure, except `proc_usage`)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]
Samples = dict[str, dict[Labels, float]]


@dataclass(frozen=True)
class Usage:
    rss_bytes: int
    cpu_s: float


def proc_usage(pid: int) -> Usage | None:
    """RSS (statm) and user+system CPU seconds (stat) of a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return None
    return Usage(int(statm[1]) * PAGE, (int(stat[11]) + int(stat[12])) / TICK)


def parse(text: str) -> Samples:
    """Prometheus text format -> {metric: {labels: value}} (comments and untyped lines skipped)."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        out.setdefault(m.group(1), {})[labels] = value
    return out


def delta(after: Samples, before: Samples, name: str) -> dict[Labels, float]:
    """A counter's increase between two scrapes, by labels (a series new in `after` counts from 0)."""
    b = before.get(name, {})
    return {k: v - b.get(k, 0.0) for k, v in after.get(name, {}).items()}


def by(series: Mapping[Labels, float], *keys: str, where: Callable[[dict[str, str]], bool] | None = None) -> dict[tuple[str, ...], float]:
    """Sum series by some of their labels (a missing label reads as "")."""
    out: dict[tuple[str, ...], float] = {}
    for labels, v in series.items():
        d = dict(labels)
        if where is not None and not where(d):
            continue
        k = tuple(d.get(key, "") for key in keys)
        out[k] = out.get(k, 0.0) + v
    return out


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of a cumulative histogram given as (upper bound, count) pairs, interpolated linearly
    inside the bucket as Prometheus' histogram_quantile does; None without observations."""
    bs = sorted(buckets)
    if not bs or bs[-1][1] <= 0:
        return None
    total = bs[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in bs:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            width = count - prev_count
            return prev_bound + (bound - prev_bound) * ((rank - prev_count) / width if width > 0 else 1.0)
        prev_bound, prev_count = bound, count
    return bs[-1][0]


def histogram_quantiles(series: Mapping[Labels, float], q: float, *keys: str,
                        where: Callable[[dict[str, str]], bool] | None = None) -> dict[tuple[str, ...], float | None]:
    """From a `_bucket` series (already differenced): the q-quantile grouped by `keys`."""
    grouped: dict[tuple[str, ...], dict[float, float]] = {}
    for labels, v in series.items():
        d = dict(labels)
        if where is not None and not where(d):
            continue
        le = d.get("le")
        if le is None:
            continue
        k = tuple(d.get(key, "") for key in keys)
        bound = math.inf if le == "+Inf" else float(le)
        grouped.setdefault(k, {})
        grouped[k][bound] = grouped[k].get(bound, 0.0) + v
    return {k: quantile(q, b.items()) for k, b in grouped.items()}


def gauge(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    return by(samples.get(name, {}), *keys)
