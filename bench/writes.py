"""Figure 3: writes on the real cgroup v1 files of this machine, under a private unique root.

A generated node (hugepages left out: the unified hugetlb controller is not enabled below the root here)
is converged by `apply` (`agent.pipeline.apply.reconcile_once`) into `/kcg-test-<hex>/kubepods/...` in the cpu
and memory hierarchies, with the pod cgroups made beforehand as the kubelet would. Then:

- converged resyncs: `CgroupFiles.writes` must not move;
- resizes: a few pods change CPU and memory limits; the writes counter must equal the number of values
  that changed, counted independently (desired files before vs after, compared as the kernel stores
  them, page-rounded), and every changed file must read back its new value from the kernel;
- the wall time of one write through the agent (`CgroupFiles.write`: confined, walked component by
  component with openat, errors typed) against a bare `os.open/os.write/os.close` of the same file with
  the same value.

The root is removed afterwards, also on failure (`tests.support.kernel.KernelRoot`). Needs root and the
v1 cpu and memory hierarchies; otherwise the figure records why it was skipped.
"""

from __future__ import annotations

import copy
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent import pipeline
from agent.config.settings import Settings, from_mapping
from agent.core.compute import compute_node
from agent.core.diff import Owner, desired_files
from agent.core.model import PodView
from agent.pipeline.apply import ensure_tiers, reconcile_once
from agent.pods.parse import parse_pod
from bench.gen import make_pod
from bench.memtree import allocatable_for
from bench.stats import summary
from cgroupfs import layout
from tests.support.kernel import CGROUPFS, KernelRoot, skip_reason

N_PODS = 30
CHANGED_PODS = 3
WRITE_SAMPLES = 3000  # per file kind and side


def _pods(n: int) -> list[dict[str, Any]]:
    rng = random.Random(3)
    out = []
    for i in range(n):
        raw = make_pod(i, rng)
        for c in raw["spec"]["containers"] + raw["spec"].get("initContainers", []):
            for kind in ("requests", "limits"):
                c["resources"].get(kind, {}).pop("hugepages-2Mi", None)
        out.append(raw)
    return out


def _settings(root_name: str, pods_file: Path, pods: list[PodView]) -> Settings:
    return from_mapping(
        {
            "cgroupfs": str(CGROUPFS),
            "cgroupRoot": "/" + root_name,
            "pods": str(pods_file),
            "allocatable": allocatable_for(pods),
            "qosReserved": {"memory": "50%"},
            "hugepageSizes": [],
            "createQOSCgroups": True,
        }
    )


def _desired(settings: Settings, env: pipeline.Environment, raws: list[dict[str, Any]]) -> dict[str, str]:
    """Tier and pod files (no container runs here) as the kernel would hold them: canonical values."""
    comp = compute_node([parse_pod(r) for r in raws], settings.compute_config(()))
    wanted = desired_files(comp, env.hierarchy, env.render_options, env.container_render_options, False)
    return {f.setting.path: layout.canonical(f.setting.filename, f.setting.value) for f in wanted}


def _resize(raws: list[dict[str, Any]], round_: int) -> list[dict[str, Any]]:
    """CHANGED_PODS pods with container limits get new CPU and memory limits (alternating values)."""
    out = copy.deepcopy(raws)
    changed = 0
    for raw in out:
        spec = raw["spec"]
        if "initContainers" in spec or "resources" in spec:
            continue
        limits = spec["containers"][0]["resources"].get("limits")
        if not limits or "cpu" not in limits:
            continue
        limits["cpu"], limits["memory"] = (("300m", "192Mi"), ("700m", "320Mi"))[round_ % 2]
        changed += 1
        if changed == CHANGED_PODS:
            break
    return out


def _time_writes(env: pipeline.Environment, relpath: str, value: str) -> dict[str, Any]:
    """Interleaved: the agent's write, then a bare open/write/close of the same file and value."""
    absolute = str(CGROUPFS / relpath)
    data = value.encode()
    agent: list[float] = []
    bare: list[float] = []
    for _ in range(WRITE_SAMPLES):
        t0 = time.perf_counter_ns()
        env.files.write(relpath, value)
        t1 = time.perf_counter_ns()
        fd = os.open(absolute, os.O_WRONLY | os.O_CLOEXEC)
        os.write(fd, data)
        os.close(fd)
        t2 = time.perf_counter_ns()
        agent.append((t1 - t0) / 1e9)
        bare.append((t2 - t1) / 1e9)
    return {
        "file": relpath.rsplit("/", 1)[-1],
        "depth": relpath.count("/"),
        "agent_s": summary(agent),
        "bare_s": summary(bare),
        "ratio": statistics.median(agent) / statistics.median(bare),
    }


def _measure(root: KernelRoot, tmp: Path, repeat: int) -> dict[str, Any]:
    raws = _pods(N_PODS)
    pods_file = tmp / "pods.json"
    pods_file.write_text(json.dumps({"kind": "List", "items": raws}))
    settings = _settings(root.name, pods_file, [parse_pod(r) for r in raws])
    env = pipeline.environment(settings)
    ensure_tiers(env)
    comp = compute_node([parse_pod(r) for r in raws], settings.compute_config(()))
    for f in desired_files(comp, env.hierarchy, env.render_options, None, False):
        if f.owner is Owner.POD:
            env.files.mkdir(f.setting.directory)
    first = reconcile_once(settings, env)
    if not first.ok:
        raise RuntimeError(f"the first apply failed: {first.errors} {first.execution.failed}")
    out: dict[str, Any] = {"pods": N_PODS, "first_apply_writes": first.execution.writes, "resyncs": [], "resizes": []}

    for _ in range(repeat):
        before = env.files.writes
        t0 = time.perf_counter()
        report = reconcile_once(settings, env)
        elapsed = time.perf_counter() - t0
        out["resyncs"].append(
            {"writes": env.files.writes - before, "reported_writes": report.execution.writes, "seconds": elapsed}
        )

    current = raws
    for r in range(repeat):
        new = _resize(current, r)
        old_values, new_values = _desired(settings, env, current), _desired(settings, env, new)
        expected = sorted(p for p, v in new_values.items() if old_values.get(p) != v)
        pods_file.write_text(json.dumps({"kind": "List", "items": new}))
        before = env.files.writes
        report = reconcile_once(settings, env)
        writes = env.files.writes - before
        wrong = [
            p
            for p in expected
            if layout.canonical(p.rsplit("/", 1)[-1], env.files.read(p) or "") != new_values[p]
        ]
        written = sorted(getattr(o.step, "path", "") for o in report.execution.outcomes)
        out["resizes"].append(
            {
                "changed_values": len(expected),
                "writes": writes,
                "same_files": written == expected,
                "read_back_wrong": wrong,
                "ok": report.ok,
            }
        )
        current = new

    cpu_dir = next(
        f.setting.directory
        for f in desired_files(comp, env.hierarchy, env.render_options, None, False)
        if f.owner is Owner.POD and f.setting.filename == layout.CPU_QUOTA
    )
    mem_dir = cpu_dir.replace(env.hierarchy.v1["cpu"], env.hierarchy.v1["memory"], 1)
    targets = [
        (f"{cpu_dir}/{layout.CPU_SHARES}", (env.files.read(f"{cpu_dir}/{layout.CPU_SHARES}") or "2").strip()),
        (f"{cpu_dir}/{layout.CPU_QUOTA}", (env.files.read(f"{cpu_dir}/{layout.CPU_QUOTA}") or "-1").strip()),
        (f"{mem_dir}/{layout.MEMORY_LIMIT}", (env.files.read(f"{mem_dir}/{layout.MEMORY_LIMIT}") or "").strip()),
    ]
    out["per_write"] = [_time_writes(env, rel, value) for rel, value in targets]
    return out


def run(repeat: int = 7) -> dict[str, Any]:
    reason = skip_reason()
    if reason is not None:
        return {"skipped": reason}
    root = KernelRoot.create()
    left: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:
            out = _measure(root, Path(tmp), repeat)
    finally:
        left = root.cleanup()
    out["root"] = "/" + root.name
    out["left_behind"] = left
    return out
