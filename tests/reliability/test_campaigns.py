"""The reliability campaigns as tests: every engine fault scenario, a few SIGKILLs and the API faults
aimed at one pod, on this host's real cgroup v1 files (skipped where kernel tests cannot run). The full
figures come from `make reliability` (RELIABILITY.md)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.infra.atomicfile import write_atomic
from tests.reliability import api_faults, crash_campaign, engine_faults, hostile
from tests.reliability.__main__ import failures, table
from tests.reliability.syscalls import SHORT, Fault, SyscallFaults
from tests.support.kernel import skip_reason

kernel = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))
ZERO = ("violations", "lost", "crashes")


@kernel
@pytest.mark.parametrize(("path", "kind", "name", "arg"), engine_faults.scenarios(), ids=lambda v: str(v))
def test_an_engine_fault_is_survived_without_a_trace(tmp_path: Path, path: str, kind: str, name: str, arg: Any) -> None:
    row = engine_faults.run_scenario(tmp_path, path, kind, name, arg, seed=7)
    assert row.injected > 0, "the fault never fired: the scenario tests nothing"
    assert {k: getattr(row, k) for k in ZERO} == dict.fromkeys(ZERO, 0), row.notes
    assert row.spoiled in (0, None), row.notes


@kernel
def test_sigkills_during_resizes_on_real_files(tmp_path: Path) -> None:
    figures = crash_campaign.run(tmp_path, kills=4, seed=3)
    assert figures.kills >= 4
    assert (figures.violations, figures.lost, figures.not_completed, figures.corrupt_records) == (0, 0, 0, 0), figures.notes


@kernel
@pytest.mark.parametrize("path", ["bare", "kubelet-owned"])
def test_an_api_fault_aimed_at_one_pod_spoils_nothing_else_and_loses_nothing(tmp_path: Path, path: str) -> None:
    row = api_faults.run_scenario(tmp_path, path, "500 on one pod's status patch", seed=2)
    assert row.injected > 0
    assert (row.violations, row.lost, row.spoiled, row.crashes) == (0, 0, 0, 0), row.notes


def test_a_fault_fires_only_for_its_file_and_its_thread(tmp_path: Path) -> None:
    target, other = tmp_path / "target", tmp_path / "other"
    faults = SyscallFaults()
    faults.add(Fault("fsync", errno.EIO, lambda p: "/.target." in p, times=1))
    seen: list[BaseException] = []

    def elsewhere() -> None:
        try:
            write_atomic(target, b"from another thread")
        except OSError as err:  # pragma: no cover - the assertion below reports it
            seen.append(err)

    with faults.armed():
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        write_atomic(other, b"x")
        with pytest.raises(OSError) as err:
            write_atomic(target, b"y")
    assert err.value.errno == errno.EIO and seen == [] and faults.injected == 1
    assert target.read_bytes() == b"from another thread"  # the failed write left the old file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "target"]  # and no temp file


def test_a_short_write_of_a_regular_file_is_completed_by_the_writer(tmp_path: Path) -> None:
    faults = SyscallFaults()
    faults.add(Fault("write", SHORT, lambda p: p.endswith(".tmp"), times=1))
    with faults.armed():
        write_atomic(tmp_path / "f", b"0123456789")
    assert (tmp_path / "f").read_bytes() == b"0123456789" and faults.injected == 1


def test_a_figure_that_must_be_zero_fails_the_run() -> None:
    ok = engine_faults.Row("bare", "cgroup write: EBUSY", injected=1, spoiled=0)
    bad = engine_faults.Row("bare", "cri: UNAVAILABLE", injected=2, lost=1, spoiled=0, notes=["victim: ..."])
    result = {"engine": [ok.to_json()], "api": [bad.to_json()], "crash": {"rounds": 1, "kills": 2, "violations": 0, "lost": 0, "not_completed": 1, "corrupt_records": 0, "notes": []}}
    assert failures(result) == ["bare / cri: UNAVAILABLE: lost = 1 (victim: ...)", "SIGKILL: not_completed = 1"]
    assert "| bare | cgroup write: EBUSY | 1 | 0 | 0 | 0 | 0 |" in table(result)
    assert os.linesep not in failures(result)[0]


def test_hostile_inputs_get_a_result_or_one_line_within_an_address_space_limit(tmp_path: Path) -> None:
    outcomes = hostile.run_all(tmp_path, short=True)
    assert len(outcomes) == 3
    for o in outcomes:
        assert o.exit in (0, 1, 2) and o.tracebacks == 0, o


def test_the_soaks_leak_and_drift_rules() -> None:
    from tests.reliability.__main__ import soak_problems

    window = {"first": {"p99_ms": 100.0}, "last": {"p99_ms": 120.0}}
    fine = {
        "resizes_lost": 0, "violations": 0, "crashes": 0, "raw_lines": 0, "healthz_failures": 0, "healthz_end": 200,
        "rss_growth_pct": 3.0, "rss_first_mib": 60, "rss_last_mib": 62, "fds_first": 20, "fds_last": 24,
        "threads_first": 9, "threads_last": 9, "children_first": 0, "children_last": 0, "apply_latency": window,
        "reconcile_pod": window, "window_s": 60.0,
    }
    assert soak_problems(fine) == []
    leaky = {**fine, "rss_growth_pct": 12.5, "fds_last": 40, "threads_last": 15, "resizes_lost": 1,
             "apply_latency": {"first": {"p99_ms": 100.0}, "last": {"p99_ms": 900.0}}}
    assert len(soak_problems(leaky)) == 5
