"""The byte parsers the sampler uses each tick read the kernel's files as parse_v1/parse_v2 read their text
(the peak aside: the sampler reads it only on an OOM)."""

from __future__ import annotations

import pytest

from agent.recommender.counters import (
    V1_EACH_TICK,
    V1_OOM,
    V1_STAT,
    V1_THROTTLING,
    V2_EACH_TICK,
    V2_OOM,
    V2_STAT,
    counters_v1,
    counters_v2,
    field_bytes,
    int_bytes,
    parse_v1,
    parse_v2,
)

# this kernel's v1 files (6.18), as read from a container's cgroup
V1_STAT_TEXT = (
    "cache 1048576\nrss 2097152\nrss_huge 0\nshmem 0\nmapped_file 0\ndirty 0\nwriteback 0\nswap 0\n"
    "inactive_anon 2097152\nactive_anon 0\ninactive_file 524288\nactive_file 524288\nunevictable 0\n"
    "hierarchical_memory_limit 9223372036854771712\ntotal_cache 1048576\ntotal_rss 2097152\n"
    "total_inactive_anon 2097152\ntotal_active_anon 0\ntotal_inactive_file 786432\ntotal_active_file 262144\n"
)
OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
CPU_STAT_V1 = "nr_periods 1000\nnr_throttled 10\nthrottled_time 123456\nnr_bursts 0\nburst_time 0\n"
CPU_STAT_V2 = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 4\nthrottled_usec 9\n"
EVENTS_V2 = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"


V1_CASES = {
    "kernel": {"cpuacct.usage": "123456789000\n", "memory.usage_in_bytes": "314572800\n", "memory.stat": V1_STAT_TEXT,
               "memory.oom_control": OOM_CONTROL, "cpu.stat": CPU_STAT_V1},
    "no-total-line": {"memory.stat": "inactive_file 4096\nactive_file 1\n", "memory.usage_in_bytes": "8192"},
    "absent": {},
    "empty": {n: "" for n in (*V1_EACH_TICK, V1_STAT, V1_THROTTLING, V1_OOM)},
    "garbage": {"cpuacct.usage": "12a\n", "memory.usage_in_bytes": "-5\n", "memory.stat": "total_inactive_file x\n",
                "memory.oom_control": "oom_kill 1 2\n", "cpu.stat": "nr_periods\nnr_throttled 3"},
    "negative-field": {"cpu.stat": "nr_periods -4\nnr_throttled 2\n", "memory.oom_control": "oom_kill -1\n"},
    "prefix-keys": {"memory.oom_control": "oom_kill_disable 1\n", "memory.stat": "xtotal_inactive_file 5\n"},
    "no-trailing-newline": {"cpuacct.usage": "42", "memory.oom_control": "under_oom 0\noom_kill 7",
                            "memory.stat": "total_inactive_file 9"},
    "spaces": {"cpuacct.usage": "  42 \n", "memory.stat": "total_inactive_file   9  \n"},
    "non-ascii-digits": {"cpuacct.usage": "4²\n", "memory.usage_in_bytes": "١٢\n"},
}

V2_CASES = {
    "kernel": {"cpu.stat": CPU_STAT_V2, "memory.current": "734003200\n", "memory.stat": "anon 1\ninactive_file 4096\n",
               "memory.events": EVENTS_V2},
    "absent": {},
    "no-usage": {"cpu.stat": "nr_periods 3\nnr_throttled 1\n", "memory.events": "oom 1\n"},
    "garbage": {"cpu.stat": "usage_usec 1.5\n", "memory.current": "max\n", "memory.stat": "inactive_file\n"},
}


def _encoded(files: dict[str, str], names: tuple[str, ...]) -> list[bytes | None]:
    return [files[n].encode() if n in files else None for n in names]


def _one(files: dict[str, str], name: str) -> bytes | None:
    return files[name].encode() if name in files else None


@pytest.mark.parametrize("case", sorted(V1_CASES))
@pytest.mark.parametrize("throttling", [True, False])
def test_v1_bytes_parse_as_the_text_does(case: str, throttling: bool) -> None:
    files = V1_CASES[case]
    names = (*V1_EACH_TICK, V1_THROTTLING) if throttling else V1_EACH_TICK
    expected = parse_v1({n: files.get(n) for n in (*names, V1_STAT, V1_OOM)})._replace(memory_peak=None)
    assert counters_v1(_encoded(files, names), _one(files, V1_STAT), _one(files, V1_OOM)) == expected


@pytest.mark.parametrize("case", sorted(V2_CASES))
def test_v2_bytes_parse_as_the_text_does(case: str) -> None:
    files = V2_CASES[case]
    expected = parse_v2({n: files.get(n) for n in (*V2_EACH_TICK, V2_STAT, V2_OOM)})._replace(memory_peak=None)
    assert counters_v2(_encoded(files, V2_EACH_TICK), _one(files, V2_STAT), _one(files, V2_OOM)) == expected


def test_the_kernel_values_are_read() -> None:
    kernel = V1_CASES["kernel"]
    c = counters_v1(_encoded(kernel, (*V1_EACH_TICK, V1_THROTTLING)), _one(kernel, V1_STAT), _one(kernel, V1_OOM))
    assert (c.cpu_usage_ns, c.memory_usage, c.inactive_file, c.oom_kills) == (123456789000, 314572800, 786432, 3)
    assert (c.nr_periods, c.nr_throttled) == (1000, 10)
    v2 = counters_v2(_encoded(V2_CASES["kernel"], V2_EACH_TICK), _one(V2_CASES["kernel"], V2_STAT), _one(V2_CASES["kernel"], V2_OOM))
    assert (v2.cpu_usage_ns, v2.oom_kills) == (2_500_000_000, 2)


@pytest.mark.parametrize(
    ("data", "key", "value"),
    [
        (b"a 1\nb 2\n", b"\nb ", 2),
        (b"b 2", b"\nb ", 2),
        (b"ab 1\n", b"\nb ", None),
        (b"b_c 1\nb 5\n", b"\nb ", 5),
        (b"b\n", b"\nb ", None),
        (b"b -3\n", b"\nb ", -3),
        (None, b"\nb ", None),
    ],
)
def test_field_bytes(data: bytes | None, key: bytes, value: int | None) -> None:
    assert field_bytes(data, key) == value


@pytest.mark.parametrize(("data", "value"), [(b"12\n", 12), (b"\n", None), (b"+1\n", None), (b"1_0\n", None), (None, None)])
def test_int_bytes(data: bytes | None, value: int | None) -> None:
    assert int_bytes(data) == value
