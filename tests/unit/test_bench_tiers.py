"""The bookkeeping behind figure 6 (bench/tiers.py, bench/daemon_child.py): when the tier files count as
current, which pass is credited, that a later write taking them back is seen, and that no line of the
daemon's output is lost. No timing is asserted."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest

from agent.core.model import PodView
from agent.daemon.reconciler import Outcome, Reconciler, Report, StopRequested
from agent.pods.parse import parse_pod
from bench.daemon import Lines
from bench.daemon_child import Timed, reads_as
from bench.gen import make_pod
from bench.memtree import allocatable_for
from bench.tiers import Model, eligible, resized, schedule

BURSTABLE = "memory/kubepods/burstable/memory.limit_in_bytes"
BESTEFFORT = "memory/kubepods/besteffort/memory.limit_in_bytes"
NEVER: StopRequested = lambda: False  # noqa: E731


class _Pod:
    def __init__(self, uid: str) -> None:
        self.uid = uid


class _Inner:
    """A reconciler whose passes run scripted writes (through the Timed hook, as WatchedFiles does)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.on_write: Callable[[str], None] = lambda path: None
        self.script: dict[str, list[tuple[str, str]]] = {}  # "pod:<uid>" / "tiers" -> writes

    def _run(self, key: str) -> int:
        writes = self.script.pop(key, [])
        for path, value in writes:
            self.files[path] = value
            self.on_write(path)
        return len(writes)

    def reconcile_pod(self, pod: PodView, stop: StopRequested) -> Report:
        return Report("pod", Outcome.APPLIED, self._run(f"pod:{pod.uid}"))

    def view_behind(self, reason: str | None) -> None:
        pass

    def reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        n = self._run("tiers")
        return Report("tiers", Outcome.APPLIED if n else Outcome.CONVERGED, n)


def _timed(files: dict[str, str]) -> tuple[Timed, _Inner]:
    inner = _Inner(files)
    timed = Timed(cast(Reconciler, inner), files.get)
    inner.on_write = timed.wrote
    return timed, inner


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_reads_as_compares_whole_pages() -> None:
    assert reads_as("99999744\n", 100_000_000)  # the kernel keeps whole pages
    assert not reads_as("99995648", 100_000_000)
    assert not reads_as(None, 1) and not reads_as("max", 1)


def test_current_in_the_own_pod_pass(capsys: pytest.CaptureFixture[str]) -> None:
    files = {BURSTABLE: "1000", BESTEFFORT: "800"}
    timed, inner = _timed(files)
    timed.reconcile_tiers([], NEVER)  # a pass before the event does not count for it
    timed.watch("a", 0.0, {BURSTABLE: 4096 * 10, BESTEFFORT: 4096 * 5})
    inner.script["pod:a"] = [(BESTEFFORT, str(4096 * 5)), (BURSTABLE, str(4096 * 10))]
    timed.reconcile_pod(cast(PodView, _Pod("a")), NEVER)
    current = _lines(capsys)
    assert current == [{"uid": "a", "tiers_current_s": current[0]["tiers_current_s"], "by": "own pod pass", "pass": 1}]
    assert timed.watches  # not done until a tiers pass started after the event ran too
    timed.reconcile_tiers([], NEVER)
    (done,) = _lines(capsys)
    assert done["watch_done"] and done["passes"] == ["own pod", "tiers"]
    assert (done["reverted"], done["current_at_end"], done["pass"]) == (0, True, 1)
    assert not timed.watches


def test_credited_to_the_tiers_pass_and_a_revert_is_seen(capsys: pytest.CaptureFixture[str]) -> None:
    files = {BURSTABLE: "8192", BESTEFFORT: "4096"}
    timed, inner = _timed(files)
    timed.watch("a", 0.0, {BURSTABLE: 4096, BESTEFFORT: 0})
    inner.script["tiers"] = [(BURSTABLE, "4096"), (BESTEFFORT, "0")]
    timed.reconcile_tiers([], NEVER)
    inner.script["pod:a"] = [(BESTEFFORT, "4096")]  # a pass taking one file back to its old value
    timed.reconcile_pod(cast(PodView, _Pod("a")), NEVER)
    first, done = _lines(capsys)
    assert (first["by"], first["pass"]) == ("tiers pass", 1)
    assert (done["reverted"], done["current_at_end"]) == (1, False)


def test_only_both_files_count(capsys: pytest.CaptureFixture[str]) -> None:
    files = {BURSTABLE: "8192", BESTEFFORT: "8192"}
    timed, inner = _timed(files)
    timed.watch("a", 0.0, {BURSTABLE: 4096, BESTEFFORT: 4096})
    inner.script["pod:a"] = [(BURSTABLE, "4096")]
    timed.reconcile_pod(cast(PodView, _Pod("a")), NEVER)
    timed.reconcile_tiers([], NEVER)
    assert _lines(capsys) == []  # one of two is not current: nothing reported, the watch stays
    inner.script["pod:b"] = [(BESTEFFORT, "4096")]
    timed.reconcile_pod(cast(PodView, _Pod("b")), NEVER)
    first, done = _lines(capsys)
    assert (first["by"], first["pass"]) == ("another pod's pass", 3)
    assert done["passes"] == ["own pod", "tiers", "pod"]


def test_lines_arriving_together_are_all_read() -> None:
    r, w = os.pipe()
    try:
        os.write(w, b'{"a": 1}\n{"b": 2}\n{"c"')
        lines = Lines(r)
        assert lines.read(1.0) == {"a": 1}
        assert lines.read(1.0) == {"b": 2}  # already read from the pipe: select() alone would miss it
        assert lines.read(0.05) is None  # incomplete
        os.write(w, b": 3}\n")
        assert lines.read(1.0) == {"c": 3}
    finally:
        os.close(r)
        os.close(w)


def test_both_resize_directions_move_both_tiers() -> None:
    rng = random.Random(3)
    raws = [make_pod(i, rng) for i in range(60)]
    config = {
        "cgroupfs": "/nonexistent",
        "allocatable": allocatable_for(parse_pod(r) for r in raws),
        "qosReserved": {"memory": "50%"},
        "hugepageSizes": ["2Mi", "1Gi"],
    }
    model = Model(raws, config)
    (up, d1), (down, d2) = schedule(eligible(raws), 1)
    assert (d1, d2) == ("up", "down")
    before = model.tiers()
    assert set(before) == {BURSTABLE, BESTEFFORT}
    model.apply(up, resized(raws[up], "up"))
    shrunk = model.tiers()
    assert all(shrunk[p] == before[p] - 128 * 2**20 for p in before)  # 50 % of +256Mi
    model.apply(down, resized(raws[down], "down"))
    assert all(model.tiers()[p] > shrunk[p] for p in before)
    changed = resized(raws[up], "up")
    assert changed["spec"]["containers"][1:] == raws[up]["spec"]["containers"][1:]
