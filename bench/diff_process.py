"""Figure 1: `diff` as a whole process over generated nodes, against `python -c pass` and
`python -c "import kubernetes"` measured in the same run."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import diff_phases
from bench.gen import make_node

SIZES = (10, 100, 1000, 5000)


def _time(cmd: list[str], repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, check=False)
        samples.append(time.perf_counter() - t0)
        if r.returncode not in (0, 1):
            raise RuntimeError(f"{cmd} failed: {r.stderr.decode()[-500:]}")
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "repeat": repeat,
    }


def run(repeat: int = 7, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    py = sys.executable
    out: dict[str, Any] = {
        "baseline_python": _time([py, "-c", "pass"], repeat),
        "baseline_import_kubernetes": _time([py, "-c", "import kubernetes"], repeat),
        "version": _time([py, "-m", "agent", "version"], repeat),
        "help": _time([py, "-m", "agent", "--help"], repeat),
        "diff": {},
    }
    with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:
        for n in sizes:
            d = Path(tmp) / f"n{n}"
            d.mkdir()
            make_node(d, n)
            cmd = [
                py, "-m", "agent", "diff", "--pods", str(d / "pods.json"), "--cgroupfs", str(d / "cgroupfs"),
                "--allocatable", "cpu=64,memory=256Gi,hugepages-2Mi=4Gi", "--qos-reserved", "memory=50%",
                "--hugepage-sizes", "2Mi,1Gi", "-o", "json",
            ]
            out["diff"][str(n)] = _time(cmd, repeat if n <= 1000 else max(3, repeat // 2))
            if n == 1000:  # the profile of the goal's size, beside its figure
                out["phases_1000"] = diff_phases.profile(cmd[4:])
    out["version_imports"] = diff_phases.imports(["version"])
    return out
