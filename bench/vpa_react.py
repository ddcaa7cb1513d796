"""Figure 14: what the CPU starvation reaction costs a node (agent.daemon.vpa_react) — one read pass a
second over the containers a VPA acts on, on this host's real cgroup v1 files.

Each size gets N pods of one container with a CPU limit, their cgroups made as the kubelet's cgroupfs driver
names them below a private kcg-test-<hex> root in the cpu and cpuacct hierarchies (removed afterwards), one
VPA acting on all of them, and the loop the daemon runs; a pass is timed (wall and this process's CPU) after
two warm-up passes. Also timed: the same node with no VPA acting on any pod (what every node pays with the
reaction on: the pods' VPA lookup alone). The kernel's counters are idle (nothing runs in these cgroups):
the reading is what costs, and it does not depend on the values.

    .venv/bin/python -m bench.vpa_react        # writes bench/results/vpa_react.json
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.config.settings import Settings
from agent.core.model import PodView, Resources
from agent.core.ownership import resolve
from agent.daemon.components import DaemonContext
from agent.daemon.vpa_react import StarvationLoop
from agent.infra.metrics import Metrics
from agent.pipeline import Environment
from agent.pods.parse import parse_pod
from agent.vpa.model import VPA, Recommendation, UpdateMode
from agent.vpa.reacting import Reactor
from agent.vpa.source import VPASource
from bench import provenance
from tests.support.kernel import KernelRoot, skip_reason

SIZES = (10, 100, 1000)
PASSES = 20
OUT = Path("bench/results/vpa_react.json")


def _raw(i: int) -> dict[str, Any]:
    uid = f"0f0e0d0c-0000-4000-8000-{i:012d}"
    cid = hashlib.sha256(f"react-bench/{i}".encode()).hexdigest()
    return {
        "metadata": {"name": f"p{i}", "namespace": "bench", "uid": uid,
                     "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                               "limits": {"cpu": "200m", "memory": "128Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{cid}", "state": {"running": {}}, "restartCount": 0}]},
    }


def _timed(loop: StarvationLoop) -> dict[str, float]:
    for i in range(2):
        loop.tick(1000.0 + i)
    walls, cpus = [], []
    for i in range(PASSES):
        w, c = time.perf_counter(), time.process_time()
        loop.tick(1002.0 + i)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {"wall_ms": statistics.median(walls) * 1000, "cpu_ms": statistics.median(cpus) * 1000}


def measure(n: int) -> dict[str, Any]:
    root = KernelRoot.create(controllers=("cpu", "cpuacct"))
    try:
        pods: list[PodView] = []
        for i in range(n):
            raw = _raw(i)
            pod = parse_pod(raw, sources=())
            pods.append(pod)
            cid = raw["status"]["containerStatuses"][0]["containerID"].split("//")[1]
            for h in ("cpu", "cpuacct"):
                root.mkdirs(h, "kubepods", "burstable", f"pod{pod.uid}", cid)
        settings = Settings(cgroupfs=root.cgroupfs, cgroup_root=f"/{root.name}")
        env = Environment(settings, root.hierarchy, (), root.files)
        ctx = DaemonContext(settings, "bench", None, Metrics(), resolve({}, None, {}, False), env, None, pods=lambda: pods)
        rec = Recommendation("app", Resources(100, 64 << 20), Resources(50, 32 << 20), Resources(150, 96 << 20))
        vpa = VPA("bench", "d", "Deployment", "d", UpdateMode.IN_PLACE, opted_in=True, recommendations=(rec,))
        owners = {("bench", "ReplicaSet", "rs"): ("Deployment", "d")}
        acted = StarvationLoop(ctx, VPASource((vpa,), owners, reactor=Reactor()), lambda: Resources(64000, 256 << 30))
        row = {"pods": n, "acted_on": _timed(acted)}
        assert len(acted.states) == n, "every container read"
        none = StarvationLoop(ctx, VPASource((), owners, reactor=Reactor()), lambda: None)
        row["none_acted_on"] = _timed(none)
        return row
    finally:
        root.cleanup()


def main() -> int:
    if (why := skip_reason()) is not None:
        print(f"bench.vpa_react: {why}", file=sys.stderr)
        return 1
    rows = [measure(n) for n in SIZES]
    out = {"measured": datetime.now(UTC).strftime("%Y-%m-%d"), "commit": provenance.current().label,
           "passes": PASSES, "command": ".venv/bin/python -m bench.vpa_react", "rows": rows}
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    for r in rows:
        print(f"{r['pods']:>5} containers: {r['acted_on']['cpu_ms']:.2f} ms CPU a pass "
              f"({r['acted_on']['cpu_ms'] * 1000 / r['pods']:.0f} µs each); none acted on: {r['none_acted_on']['cpu_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
