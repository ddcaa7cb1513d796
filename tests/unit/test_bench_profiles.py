"""The profiles `make bench` writes beside a missed goal: they measure what the figure measures, and their
text follows their numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import diff_phases
from bench.containerd import REST, split
from bench.gen import make_node
from bench.sections.agent_time import _phases

ROOT = Path(__file__).resolve().parents[2]


def _stat(cumtime: float, tottime: float = 0.0) -> tuple[Any, ...]:
    return (1, 1, tottime, cumtime, {})


def test_the_resize_profile_splits_the_time_outside_grpc_by_step() -> None:
    stats = {
        ("/x/grpc/_channel.py", 1, "_blocking"): _stat(0.9, 0.9),
        ("/r/agent/resize/tally.py", 83, "snapshot"): _stat(0.2, 0.05),
        ("/r/agent/resize/store.py", 203, "save_changed"): _stat(0.1, 0.1),
        ("/r/agent/core/plan/build.py", 65, "build_plan"): _stat(0.05, 0.05),
        ("/r/agent/resize/engine.py", 182, "_pass"): _stat(1.4, 0.2),
        ("~", 0, "<built-in method posix.read>"): _stat(0.15, 0.15),
    }
    got = split(stats, resizes=10)
    assert got["in_grpc_s"] == pytest.approx(0.09)
    assert got["own_s"] == pytest.approx(0.055)  # (0.05 + 0.1 + 0.05 + 0.2 + 0.15) / 10
    steps = got["per_resize_s"]
    assert steps[next(k for k in steps if k.startswith("two snapshots"))] == pytest.approx(0.02)
    assert steps[next(k for k in steps if k.startswith("state record"))] == pytest.approx(0.01)
    assert steps[next(k for k in steps if k.startswith("admission"))] == 0.0
    assert steps[REST] == pytest.approx(0.055 - 0.02 - 0.01 - 0.005)
    assert sum(got["share"].values()) == pytest.approx(1.0)


def test_importtime_keeps_only_the_top_of_the_tree() -> None:
    text = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:       100 |        100 |     encodings.utf_8",
        "import time:       300 |       1200 |   agent.commands.arguments",
        "import time:       400 |       2500 | agent.commands.main",
        "import time:        50 |        900 | site",
        "some other line",
    ])
    assert diff_phases.top_level(text) == {"agent.commands.main": 0.0025, "site": 0.0009}


def _phase_data(whole: float) -> dict[str, float]:
    return {"imports": 0.04, "settings": 0.005, "pods": 0.045, "compute": 0.035, "render": 0.04, "read": 0.1,
            "diff": 0.015, "output": 0.002, "floor_read": 0.06, "files": 13000.0, "runs": 3.0, "output_bytes": 1.0}


def test_the_diff_profile_says_what_a_missed_goal_would_need() -> None:
    missed = " ".join(_phases(_phase_data(0.3), whole=0.3, start=0.025))
    assert "| the node's files read | 100 ms |" in missed
    assert "| sum of the phases | 282 ms |" in missed
    assert "Everything but those system calls is Python: 222 ms, 222 µs a pod" in missed
    # goal min(250, 8 × 25) = 200 ms, less the start (25) and the read's floor (60): 115 ms of Python left
    assert "The goal (200 ms) leaves 115 ms of Python" in missed and "107 ms less than now" in missed
    assert "The largest phase's Python, pods loaded and parsed, is 45 ms" in missed
    met = " ".join(_phases(_phase_data(0.15), whole=0.15, start=0.025))
    assert "leaves" not in met and "Tried and not kept" not in met


def test_the_diff_profile_runs_the_steps_of_diff_and_renders_what_the_command_prints(tmp_path: Path) -> None:
    make_node(tmp_path, 10)
    argv = ["--pods", str(tmp_path / "pods.json"), "--cgroupfs", str(tmp_path / "cgroupfs"),
            "--allocatable", "cpu=64,memory=256Gi,hugepages-2Mi=4Gi", "--qos-reserved", "memory=50%",
            "--hugepage-sizes", "2Mi,1Gi", "-o", "json"]
    got = diff_phases.profile(argv, runs=1)
    assert set(diff_phases.PHASES) <= set(got)
    assert all(got[k] > 0 for k in diff_phases.PHASES)
    cli = subprocess.run([sys.executable, "-m", "agent", "diff", *argv], capture_output=True, text=True, cwd=ROOT, check=False)
    assert cli.returncode == 1, cli.stderr  # the generated node has drift
    assert got["output_bytes"] == len(cli.stdout.rstrip("\n"))
    assert got["files"] >= 10 * 5  # each pod's and container's files
    json.loads(cli.stdout)


def test_the_sampling_profile_splits_a_tick_and_says_what_a_miss_would_need() -> None:
    from bench.recommender import _where

    base = {"containers": 1000, "histograms_per_tick_s": 0.0015, "pread_floor_per_tick_s": 0.002}
    missed = " ".join(_where({**base, "cpu_per_tick_s": 0.0135}))
    assert "the histograms 1.5 ms" in missed and "2,000 descriptors" in missed
    assert "the rest, 10.0 ms (10.0 µs a container)" in missed
    assert "6.5 µs of Python a container against 10.0 now" in missed  # (10 - 2 - 1.5) ms over 1,000
    met = " ".join(_where({**base, "cpu_per_tick_s": 0.008}))
    assert "the rest, 4.5 ms" in met and "Under 1 %" not in met
    assert _where({"cpu_per_tick_s": 0.008, "containers": 1000}) == []  # results from before the split
