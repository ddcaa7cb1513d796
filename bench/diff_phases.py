"""Figure 1's profile: where one `diff` process over a generated node spends its wall time, phase by phase.

Run as `python -m bench.diff_phases NODE_DIR ARGS...` in a fresh interpreter (so the imports are cold, as in
the whole-process figure): it runs the steps of `agent.commands.dryrun.diff` one by one, times each, and
prints them as JSON. The floor beside them: a bare loop of the same open/read/close system calls over the
same files, the least any program reading them pays.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

PHASES = ("imports", "settings", "pods", "compute", "render", "read", "diff", "output")


def _measure(argv: list[str]) -> dict[str, float]:
    """One diff, phase by phase, in this (fresh) process; mirrors `dryrun.diff` + `pipeline.compare`."""
    gc.disable()  # as the CLI does for a one-pass command (agent.commands.main.ONE_PASS)
    times: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        times[name] = now - t
        t = now

    from agent import pipeline
    from agent.commands import render
    from agent.commands.arguments import build_settings, parser
    from agent.core.diff import desired_files, diff, paths_to_read

    lap("imports")
    settings = build_settings(parser("diff").parse_args(["diff", *argv]))
    env = pipeline.environment(settings)
    lap("settings")
    loaded = pipeline.load_pods(settings)
    lap("pods")
    comp = pipeline.compute(settings, env, loaded.pods, loaded.errors, loaded.warnings)
    lap("compute")
    wanted = desired_files(comp, env.hierarchy, env.render_options, env.container_render_options, True)
    lap("render")
    observed = pipeline.observe(env, wanted)
    lap("read")
    node = diff(comp, wanted, observed)
    lap("diff")
    text = render.diff_json(node, False)
    lap("output")
    times["output_bytes"] = float(len(text))
    paths = [str(settings.cgroupfs / p) for p in paths_to_read(wanted)]
    times["files"] = float(len(paths))
    times["floor_read"] = _bare_reads(paths)
    return times


def _bare_reads(paths: list[str]) -> float:
    """The same files opened, read once and closed by a bare loop: the system calls alone."""
    t = time.perf_counter()
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        os.read(fd, 4096)
        os.close(fd)
    return time.perf_counter() - t


def profile(argv: list[str], runs: int = 3) -> dict[str, Any]:
    """Each phase's best over `runs` fresh processes (the least-disturbed measure of the work itself)."""
    seen: list[dict[str, float]] = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-m", "bench.diff_phases", *argv], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"diff phases failed: {r.stderr[-500:]}")
        seen.append(json.loads(r.stdout))
    best = {k: min(s[k] for s in seen) for k in seen[0]}  # the counts (files, output bytes) are the same in each
    best["runs"] = runs
    return best


def imports(argv: list[str], runs: int = 3) -> dict[str, float]:
    """`python -X importtime` of a command: each top-level import's cumulative time (s), best of `runs`."""
    best: dict[str, float] = {}
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent", *argv], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"agent {' '.join(argv)} failed: {r.stderr[-500:]}")
        for name, t in top_level(r.stderr).items():
            best[name] = min(best.get(name, t), t)
    return dict(sorted(best.items(), key=lambda kv: -kv[1]))


def top_level(importtime: str) -> dict[str, float]:
    """The imports at the top of `-X importtime`'s tree (its name indented by exactly one space) and their
    cumulative times in seconds; a module imported twice at the top keeps its larger time."""
    out: dict[str, float] = {}
    for line in importtime.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not line.startswith("import time:"):
            continue
        name = parts[2]
        if not name.startswith(" ") or name.startswith("  "):
            continue
        try:
            seconds = float(parts[1]) / 1e6
        except ValueError:  # the header line
            continue
        out[name.strip()] = max(out.get(name.strip(), 0.0), seconds)
    return out


if __name__ == "__main__":
    result = _measure(sys.argv[1:])
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
