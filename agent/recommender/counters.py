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
# cpu.stat on v1 only matters to a starvation-aware CPU sample. memory.stat, for the inactive file pages
# a working set leaves out, is read every few ticks: it is the costliest file for the kernel to print (a
# hundred lines), and those pages move slowly; the usage is read every tick, so no peak is missed. The
# OOM-kill counter is read every few ticks (it only counts up, so no kill is missed, and the OOM sample's
# memory is the peak, which the kernel keeps); the peak only to an OOM sample, read then.
V1_EACH_TICK = ("cpuacct.usage", "memory.usage_in_bytes")
V1_STAT = "memory.stat"
V1_THROTTLING = "cpu.stat"
V1_OOM = "memory.oom_control"
V1_PEAK = "memory.max_usage_in_bytes"
V2_EACH_TICK = ("cpu.stat", "memory.current")
V2_STAT = "memory.stat"
V2_OOM = "memory.events"
V2_PEAK = "memory.peak"


def int_bytes(data: bytes | None) -> int | None:
    """`_int` on the raw file: a bare decimal (bytes.isdigit is ASCII only, as `_digits` is)."""
    if data is None:
        return None
    t = data.strip()
    return int(t) if t.isdigit() else None


def field_bytes(data: bytes | None, key: bytes) -> int | None:
    """One "key value" line of a flat-keyed file, as `_kv` reads it, found without splitting the file:
    `key` is b"\\n" + the name + b" " (as the kernel prints it); the line starts the file or follows a
    newline, and holds one integer."""
    if data is None:
        return None
    i = data.find(key)
    if i >= 0:
        start = i + len(key)
    elif data.startswith(key[1:]):
        start = len(key) - 1
    else:
        return None
    end = data.find(b"\n", start)
    t = (data[start:] if end < 0 else data[start:end]).strip()
    if t.isdigit() or (t[:1] == b"-" and t[1:].isdigit()):
        return int(t)
    return None


Reading = tuple[int | None, int | None, int | None, int | None, int | None, int | None, int | None]
"""`Counters` as a plain tuple (same fields, same order): what the sampler keeps per container, built
without a NamedTuple's Python-level __new__."""


def oom_kills(data: bytes | None) -> int | None:
    """The OOM-kill counter of v1's memory.oom_control or v2's memory.events."""
    return field_bytes(data, b"\noom_kill ")


def inactive_v1(stat: bytes | None) -> int | None:
    """The inactive file pages of v1's memory.stat (the hierarchy's total, else the cgroup's own)."""
    inactive = field_bytes(stat, b"\ntotal_inactive_file ")
    return inactive if inactive is not None else field_bytes(stat, b"\ninactive_file ")


def inactive_v2(stat: bytes | None) -> int | None:
    return field_bytes(stat, b"\ninactive_file ")


def values_v1(data: Sequence[bytes | None], inactive: int | None, kills: int | None) -> Reading:
    """`data` holds V1_EACH_TICK's files, then cpu.stat when it was read; `inactive` and `kills` the
    counters read less often (memory.stat's inactive file pages, the OOM-kill counter)."""
    cpu_usage, usage = data[0], data[1]
    periods = throttled = None
    if len(data) > 2 and (cpu_stat := data[2]) is not None:
        periods, throttled = field_bytes(cpu_stat, b"\nnr_periods "), field_bytes(cpu_stat, b"\nnr_throttled ")
    return (int_bytes(cpu_usage), periods, throttled, int_bytes(usage), inactive, None, kills)


def values_v2(data: Sequence[bytes | None], inactive: int | None, kills: int | None) -> Reading:
    """`data` holds V2_EACH_TICK's files; `inactive` and `kills` as for values_v1."""
    cpu_stat = data[0]
    usage_usec = field_bytes(cpu_stat, b"\nusage_usec ")
    return (
        usage_usec * 1000 if usage_usec is not None else None,
        field_bytes(cpu_stat, b"\nnr_periods "),
        field_bytes(cpu_stat, b"\nnr_throttled "),
        int_bytes(data[1]),
        inactive,
        None,
        kills,
    )


def counters_v1(data: Sequence[bytes | None], stat: bytes | None, oom: bytes | None) -> Counters:
    return Counters(*values_v1(data, inactive_v1(stat), oom_kills(oom)))


def counters_v2(data: Sequence[bytes | None], stat: bytes | None, oom: bytes | None) -> Counters:
    return Counters(*values_v2(data, inactive_v2(stat), oom_kills(oom)))


class Observation(NamedTuple):
    """What one tick saw of one container."""

    cpu_cores: float | None  # average over the interval since the previous reading
    working_set: int | None
    throttled_fraction: float | None  # of the CFS periods in the interval
    new_oom_kills: int


def working_set(c: Reading) -> int | None:
    usage = c[3]  # memory_usage, inactive_file: by index, so a plain Reading serves as well as Counters
    if usage is None:
        return None
    return max(usage - (c[4] or 0), 0)


def rates(previous: Reading | None, current: Reading, elapsed_s: float) -> tuple[float | None, float | None, int]:
    """(CPU cores, throttled fraction of the periods, new OOM kills) between two readings. A CPU rate
    needs two readings; a counter that went backwards (a restarted container) gives none."""
    cores = throttled = None
    kills = 0
    if previous is not None and elapsed_s > 0:
        p_cpu, p_periods, p_throttled, _, _, _, p_kills = previous
        c_cpu, c_periods, c_throttled, _, _, _, c_kills = current
        if p_cpu is not None and c_cpu is not None and c_cpu >= p_cpu:
            cores = (c_cpu - p_cpu) / 1e9 / elapsed_s
        if p_periods is not None and c_periods is not None and p_throttled is not None and c_throttled is not None:
            periods = c_periods - p_periods
            if periods > 0:
                throttled = max(c_throttled - p_throttled, 0) / periods
        if p_kills is not None and c_kills is not None:
            kills = max(c_kills - p_kills, 0)
    return cores, throttled, kills


def observe(previous: Counters | None, current: Counters, elapsed_s: float) -> Observation:
    cores, throttled, kills = rates(previous, current, elapsed_s)
    return Observation(cores, working_set(current), throttled, kills)


def cpu_value(cores: float | None, throttled: float | None, cpu_limit_cores: float | None, starvation: bool,
              threshold: float) -> float | None:
    """The CPU sample: usage, or — with starvation on and the container throttled in more than `threshold` of
    its periods — its limit, since throttling hides its real demand."""
    if cores is None:
        return None
    if starvation and cpu_limit_cores and throttled is not None and throttled > threshold:
        return max(cores, cpu_limit_cores)
    return cores


def cpu_sample(obs: Observation, cpu_limit_cores: float | None, starvation: bool, threshold: float) -> float | None:
    return cpu_value(obs.cpu_cores, obs.throttled_fraction, cpu_limit_cores, starvation, threshold)
