"""Writes the pod-cgroup traces of tests/recommender/test_podlevel_model.py (run from the repository root:
`.venv/bin/python -m tests.recommender.traces.podlevel_make`). A trace is JSON lines, one reading of a
two-container pod's cgroups a line: `{"ts": UNIX seconds, "": pod, "app": ..., "side": ...}`, each
`[CPU seconds used, memory usage, inactive file pages, memory peak, OOM kills counted]` as the kernel keeps
them (the pod cgroup's kills are those below it, as v2's memory.events counts them). Deterministic."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path

MB = 1_000_000
T0 = 1_764_000_000


Curve = Callable[[int], float]  # the reading's index -> cores or bytes


def _trace(steps: int, step_s: int, app_cpu: Curve, app_mem: Curve, side_cpu: Curve, side_mem: Curve,
           kills: dict[int, str], seed: int) -> list[str]:
    rng = random.Random(seed)
    cpu = {"app": 0.0, "side": 0.0}
    peak = {"app": 0, "side": 0, "": 0}
    killed = {"app": 0, "side": 0}
    lines = []
    for i in range(steps):
        usage = {"app": int(app_mem(i) + rng.uniform(0, 4 * MB)), "side": int(side_mem(i) + rng.uniform(0, 2 * MB))}
        inactive = {"app": 12 * MB, "side": 3 * MB}
        if i in kills:  # the container grew to its share of the pod limit and was killed
            usage[kills[i]] = 700 * MB
            killed[kills[i]] += 1
        if i:
            cpu["app"] += max(app_cpu(i) + rng.uniform(-0.02, 0.02), 0.0) * step_s
            cpu["side"] += max(side_cpu(i) + rng.uniform(-0.005, 0.005), 0.0) * step_s
        row: dict[str, object] = {"ts": T0 + i * step_s}
        for c in ("app", "side"):
            peak[c] = max(peak[c], usage[c])
            row[c] = [round(cpu[c], 6), usage[c], inactive[c], peak[c], killed[c]]
        pod_usage = usage["app"] + usage["side"] + 2 * MB  # the pause container's
        peak[""] = max(peak[""], pod_usage)
        row[""] = [round(cpu["app"] + cpu["side"], 6), pod_usage, inactive["app"] + inactive["side"], peak[""],
                   killed["app"] + killed["side"]]
        lines.append(json.dumps(row, separators=(",", ":")))
    return lines


def traces() -> dict[str, list[str]]:
    return {
        # two days every 2 minutes: app 0.25 cores with a spike to 0.9 every tenth reading, 180-260 MB saw-tooth;
        # side 0.05 cores, 60 MB; app OOM-killed at 30 h
        "podlevel-oom.jsonl": _trace(1440, 120, lambda i: 0.9 if i % 10 == 0 else 0.25,
                                     lambda i: 180 * MB + (i % 40) * 2 * MB, lambda i: 0.05, lambda i: 60 * MB,
                                     {900: "app"}, 1),
        # three days every 5 minutes: a daily cycle of both (app 0.1-0.7 cores, 150-350 MB; side 0.02-0.2, 50-90 MB);
        # side OOM-killed on the third day
        "podlevel-days.jsonl": _trace(864, 300, lambda i: 0.4 + 0.3 * math.sin(i * 2 * math.pi / 288),
                                      lambda i: 250 * MB + 100 * MB * math.sin(i * 2 * math.pi / 288),
                                      lambda i: 0.11 + 0.09 * math.cos(i * 2 * math.pi / 288),
                                      lambda i: 70 * MB + 20 * MB * math.cos(i * 2 * math.pi / 288), {700: "side"}, 2),
    }


if __name__ == "__main__":
    here = Path(__file__).parent
    for name, lines in traces().items():
        (here / name).write_text("\n".join(lines) + "\n")
