"""Figure 4: a resize through the agent against the bare UpdateContainerResources call, on real containerd.

The measuring code is an e2e test (tests/e2e/test_bench_resize.py) because it needs `make e2e`'s
private containerd; this runs tests/e2e/run.sh with KCG_BENCH_OUT set and PYTEST_ARGS selecting that
module, then summarises the samples it wrote.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import summary

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tests/e2e/test_bench_resize.py"


def command() -> str:
    return "KCG_BENCH_OUT=<file> PYTEST_ARGS='-k test_bench_resize' bash tests/e2e/run.sh"


def run(repeat: int = 7) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {"skipped": "needs root: tests/e2e/run.sh starts a private containerd"}
    with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:
        out_file = Path(tmp) / "resize.json"
        env = {
            **os.environ,
            "KCG_BENCH_OUT": str(out_file),
            "KCG_BENCH_ROUNDS": str(max(10, 2 * repeat)),
            "PYTEST_ARGS": "-k test_bench_resize -p no:cacheprovider -q",
        }
        t0 = time.perf_counter()
        proc = subprocess.run(
            ["bash", str(ROOT / "tests/e2e/run.sh")], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not out_file.exists():
            tail = (proc.stdout + proc.stderr)[-3000:]
            return {"skipped": f"tests/e2e/run.sh exited {proc.returncode}", "output_tail": tail}
        raw = json.loads(out_file.read_text())
    out: dict[str, Any] = {"rounds": raw["rounds"], "harness_wall_s": wall, "command": command(), "scenarios": {}}
    for name, kinds in raw["scenarios"].items():
        for kind, samples in kinds.items():
            agent, bare = samples["agent_s"], samples["bare_s"]
            out["scenarios"].setdefault(name, {})[kind] = {
                "agent_s": summary(agent),
                "bare_s": summary(bare),
                "in_cri_s": summary(samples["in_cri_s"]),
                "own_s": summary([t - c for t, c in zip(agent, samples["in_cri_s"], strict=True)]),
                "ratio": statistics.median(agent) / statistics.median(bare),
                "cri_calls_per_resize": statistics.median(samples["cri_calls"]),
                "writes_per_resize": statistics.median(samples["writes"]),
            }
    return out
