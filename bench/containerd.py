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
        where = _profiled(env, Path(tmp))
    out: dict[str, Any] = {"rounds": raw["rounds"], "harness_wall_s": wall, "command": command(), "scenarios": {}}
    if where is not None:
        out["own_time_profile"] = where
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


# Where the agent's own time goes: the disjoint steps of one resize pass, each by its cumulative time under the
# profiler (module path suffix, function); what is left of the time outside gRPC is the rest of the pass (its
# cgroup writes, the executor, status and events).
_STEPS: dict[str, tuple[str, str]] = {
    "two snapshots (the pod's kernel files read back, its values computed; before and after the update)": (
        "agent/resize/tally.py", "snapshot"),
    "state record (written, fsynced, renamed before the first write)": ("agent/resize/store.py", "save_changed"),
    "plan and invariant replay": ("agent/core/plan/build.py", "build_plan"),
    "admission": ("agent/resize/state.py", "admit_pending"),
}
REST = "the rest of the pass (cgroup writes, executor, status)"


def _profiled(env: dict[str, str], tmp: Path) -> dict[str, Any] | None:
    """A second, profiled run of the CPU scenario (its times are not the figure's: the profiler slows the
    Python): per resize, the agent's time outside the CRI call split into the steps of `_STEPS`, and each
    step's share of it (the shares, applied to the unprofiled own time, are what the figure shows)."""
    import pstats

    prefix = tmp / "profile"
    proc = subprocess.run(
        ["bash", str(ROOT / "tests/e2e/run.sh")], cwd=ROOT, capture_output=True, text=True, check=False,
        env={**env, "KCG_BENCH_OUT": str(tmp / "profiled.json"), "KCG_BENCH_PROFILE": str(prefix), "KCG_BENCH_ROUNDS": "10"},
    )
    path = Path(f"{prefix}.engine.128Mi.prof")
    if proc.returncode != 0 or not path.exists():
        return None
    return split(pstats.Stats(str(path)).stats, resizes=20)  # type: ignore[attr-defined]  # 10 rounds, 2 each


def split(stats: dict[tuple[str, int, str], tuple[Any, ...]], resizes: int) -> dict[str, Any]:
    """Per resize: the time in gRPC, the time outside it, and the latter by step (`_STEPS`, then the rest)."""
    total = grpc = 0.0
    steps = dict.fromkeys(_STEPS, 0.0)
    for (file, _line, func), (_cc, _nc, tottime, cumtime, _callers) in stats.items():
        total += tottime
        if "grpc" in file:
            grpc += tottime
        for label, (suffix, name) in _STEPS.items():
            if func == name and file.endswith(suffix):
                steps[label] += cumtime
    own = (total - grpc) / resizes
    out = {label: t / resizes for label, t in steps.items()}
    out[REST] = max(own - sum(out.values()), 0.0)
    return {"per_resize_s": out, "share": {k: v / own for k, v in out.items()} if own else {}, "own_s": own,
            "in_grpc_s": grpc / resizes, "resizes": resizes}
