"""Kernel counters of one container to samples (pure): the file names per cgroup version, how each file
parses, and how two readings a tick apart become a CPU rate, a working set, a throttling ratio and OOM kills.

v1: cpuacct.usage (ns), cpu.stat (nr_periods, nr_throttled, throttled_time), memory.usage_in_bytes,
memory.stat (total_inactive_file), memory.max_usage_in_bytes, memory.oom_control (oom_kill).
v2: cpu.stat (usage_usec, nr_periods, nr_throttled), memory.current, memory.stat (inactive_file),
memory.peak, memory.events (oom_kill). Working set = usage − inactive file, as cAdvisor defines it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple


class Counters(NamedTuple):
    """One reading of a container's counters; None where the file was absent or unreadable.

    A NamedTuple, as `Observation` and `trace.Sample` are: the sampler builds a few per container each
    second, and a frozen dataclass costs a call per field (about 2 µs for seven) where a tuple does not."""

    cpu_usage_ns: int | None = None
    nr_periods: int | None = None
    nr_throttled: int | None = None
    memory_usage: int | None = None
    inactive_file: int | None = None
    memory_peak: int | None = None
    oom_kills: int | None = None


def _kv(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and _digits(parts[1].lstrip("-")):
            out[parts[0]] = int(parts[1])
    return out


def _digits(text: str) -> bool:
    """ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses."""
    return text.isascii() and text.isdigit()


def _int(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if _digits(t) else None


def parse_v1(files: Mapping[str, str | None]) -> Counters:
    """`files` maps the v1 file names to their text."""
    cpu = _kv(files.get("cpu.stat"))
    stat = _kv(files.get("memory.stat"))
    oom = _kv(files.get("memory.oom_control"))
    return Counters(
        cpu_usage_ns=_int(files.get("cpuacct.usage")),
        nr_periods=cpu.get("nr_periods"),
        nr_throttled=cpu.get("nr_throttled"),
        memory_usage=_int(files.get("memory.usage_in_bytes")),
        inactive_file=stat.get("total_inactive_file", stat.get("inactive_file")),
        memory_peak=_int(files.get("memory.max_usage_in_bytes")),
        oom_kills=oom.get("oom_kill"),
    )


def parse_v2(files: Mapping[str, str | None]) -> Counters:
    cpu = _kv(files.get("cpu.stat"))
    stat = _kv(files.get("memory.stat"))
    events = _kv(files.get("memory.events"))
    usage_usec = cpu.get("usage_usec")
    return Counters(
        cpu_usage_ns=usage_usec * 1000 if usage_usec is not None else None,
        nr_periods=cpu.get("nr_periods"),
        nr_throttled=cpu.get("nr_throttled"),
        memory_usage=_int(files.get("memory.current")),
        inactive_file=stat.get("inactive_file"),
        memory_peak=_int(files.get("memory.peak")),
        oom_kills=events.get("oom_kill"),
    )


V1_FILES = {
    "cpuacct": ("cpuacct.usage",),
    "cpu": ("cpu.stat",),
    "memory": ("memory.usage_in_bytes", "memory.stat", "memory.max_usage_in_bytes", "memory.oom_control"),
}
V2_FILES = ("cpu.stat", "memory.current", "memory.stat", "memory.peak", "memory.events")


# What a tick reads, in this order (the sampler keeps these files open): the counters every sample needs.
# cpu.stat on v1 only matters to a starvation-aware CPU sample; the peak only to an OOM sample, read then.
V1_EACH_TICK = ("cpuacct.usage", "memory.usage_in_bytes", "memory.stat", "memory.oom_control")
V1_THROTTLING = "cpu.stat"
V1_PEAK = "memory.max_usage_in_bytes"
V2_EACH_TICK = ("cpu.stat", "memory.current", "memory.stat", "memory.events")
V2_PEAK = "memory.peak"


def int_bytes(data: bytes | None) -> int | None:
    """`_int` on the raw file: a bare decimal (bytes.isdigit is ASCII only, as `_digits` is)."""
    if data is None:
        return None
    t = data.strip()
    return int(t) if t.isdigit() else None


def field_bytes(data: bytes | None, key: bytes) -> int | None:
    """One "key value" line of a flat-keyed file, as `_kv` reads it, found without splitting the file:
    `key` (with its trailing space, as the kernel prints it) starts a line and one integer follows."""
    if data is None:
        return None
    if data.startswith(key):
        start = len(key)
    else:
        i = data.find(b"\n" + key)
        if i < 0:
            return None
        start = i + 1 + len(key)
    end = data.find(b"\n", start)
    t = (data[start:] if end < 0 else data[start:end]).strip()
    if t.isdigit() or (t[:1] == b"-" and t[1:].isdigit()):
        return int(t)
    return None


def counters_v1(data: Sequence[bytes | None]) -> Counters:
    """`data` holds V1_EACH_TICK's files, then cpu.stat when it was read."""
    cpu_stat = data[4] if len(data) > 4 else None
    stat = data[2]
    inactive = field_bytes(stat, b"total_inactive_file ")
    return Counters(
        cpu_usage_ns=int_bytes(data[0]),
        nr_periods=field_bytes(cpu_stat, b"nr_periods "),
        nr_throttled=field_bytes(cpu_stat, b"nr_throttled "),
        memory_usage=int_bytes(data[1]),
        inactive_file=inactive if inactive is not None else field_bytes(stat, b"inactive_file "),
        oom_kills=field_bytes(data[3], b"oom_kill "),
    )


def counters_v2(data: Sequence[bytes | None]) -> Counters:
    """`data` holds V2_EACH_TICK's files."""
    cpu_stat = data[0]
    usage_usec = field_bytes(cpu_stat, b"usage_usec ")
    return Counters(
        cpu_usage_ns=usage_usec * 1000 if usage_usec is not None else None,
        nr_periods=field_bytes(cpu_stat, b"nr_periods "),
        nr_throttled=field_bytes(cpu_stat, b"nr_throttled "),
        memory_usage=int_bytes(data[1]),
        inactive_file=field_bytes(data[2], b"inactive_file "),
        oom_kills=field_bytes(data[3], b"oom_kill "),
    )


class Observation(NamedTuple):
    """What one tick saw of one container."""

    cpu_cores: float | None  # average over the interval since the previous reading
    working_set: int | None
    throttled_fraction: float | None  # of the CFS periods in the interval
    new_oom_kills: int


def working_set(c: Counters) -> int | None:
    if c.memory_usage is None:
        return None
    return max(c.memory_usage - (c.inactive_file or 0), 0)


def observe(previous: Counters | None, current: Counters, elapsed_s: float) -> Observation:
    """A CPU rate needs two readings; a counter that went backwards (a restarted container) gives none."""
    cores = throttled = None
    kills = 0
    if previous is not None and elapsed_s > 0:
        if previous.cpu_usage_ns is not None and current.cpu_usage_ns is not None and current.cpu_usage_ns >= previous.cpu_usage_ns:
            cores = (current.cpu_usage_ns - previous.cpu_usage_ns) / 1e9 / elapsed_s
        if None not in (previous.nr_periods, current.nr_periods, previous.nr_throttled, current.nr_throttled):
            assert previous.nr_periods is not None and current.nr_periods is not None
            assert previous.nr_throttled is not None and current.nr_throttled is not None
            periods = current.nr_periods - previous.nr_periods
            if periods > 0:
                throttled = max(current.nr_throttled - previous.nr_throttled, 0) / periods
        if previous.oom_kills is not None and current.oom_kills is not None:
            kills = max(current.oom_kills - previous.oom_kills, 0)
    return Observation(cores, working_set(current), throttled, kills)


def cpu_sample(obs: Observation, cpu_limit_cores: float | None, starvation: bool, threshold: float) -> float | None:
    """The CPU sample: usage, or — with starvation on and the container throttled in more than `threshold` of
    its periods — its limit, since throttling hides its real demand."""
    if obs.cpu_cores is None:
        return None
    if starvation and cpu_limit_cores and obs.throttled_fraction is not None and obs.throttled_fraction > threshold:
        return max(obs.cpu_cores, cpu_limit_cores)
    return obs.cpu_cores
