"""Run the resize engine as a separate process in lockstep with a ResizeNode (tests/resize/engine_runner.py)
and SIGKILL it, by PID, just before an exact step: shared by the SIGKILL tests and `make reliability`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.resize.harness import ResizeNode

ROOT = Path(__file__).resolve().parents[2]


def run_agent(node: ResizeNode, workdir: Path, kill_at: int | None) -> list[dict[str, Any]] | None:
    """Run the engine process over a ResizeNode, its tree checked between every two steps."""
    cfg = {
        "cgroupfs": str(node.tree.root),
        "endpoint": node.cri.endpoint,
        "allocatable": "cpu=8,memory=16Gi",
        "state_dir": str(node.settings.state_dir),
        "cgroup_root": node.settings.cgroup_root,
        "v1": dict(node.tree.hierarchy.v1),
        "pods": [node.raw(p) for p in node.pods],
    }
    return run_engine(cfg, workdir, kill_at, lambda: node.violations.extend(node.check()))


def run_engine(
    cfg: dict[str, Any], workdir: Path, kill_at: int | None, check: Callable[[], None]
) -> list[dict[str, Any]] | None:
    """Run the engine process (tests/resize/engine_runner.py) on `cfg`; `check` runs between every two
    of its steps; SIGKILL it (by PID) just before step `kill_at`. The statuses it printed at the end,
    or None when it was killed."""
    path = workdir / "runner.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.resize.engine_runner", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in proc.stdout:
            check()  # the tree after the previous step
            if line.startswith("step "):
                if kill_at is not None and int(line.split()[1]) == kill_at:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif line.startswith("done "):
                statuses: list[dict[str, Any]] = json.loads(line[5:])
                assert proc.wait() == 0
                return statuses
        raise AssertionError(f"the engine process ended without a result (exit {proc.wait()})")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
