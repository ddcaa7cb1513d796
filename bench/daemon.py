"""Figure 5: the daemon with 1,000 pods — event -> applied latency, RSS and idle CPU (psutil).

A generated node of 1,000 pods is written as a converged fake cgroup tree on disk (real file I/O, not
the kernel's files); the fake CRI server (tests.fakes.fake_cri) runs in this process and knows every
container, mirroring each UpdateContainerResources into the tree as runc would. The daemon runs in its
own process (`bench.daemon_child`, wired as `agent.daemon.run`), once per reconciler: `pipeline`, and
`engine` (what `reconciler: auto` picks on a bare node). For each: wait until the first full pass is
done, RSS, CPU over 60 s with no events (the default resyncPeriod, 60 s, so the window holds one
resync), then pod events one at a time, each timed inside the daemon from the event to the pod's pass
having applied it and to the next tiers pass finishing. The daemon is stopped by its PID.
"""

from __future__ import annotations

import copy
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import psutil

from agent.compute import compute_node
from agent.cri.v1 import api_pb2 as pb
from agent.diff import Owner, desired_files
from agent.pods.parse import parse_pod
from bench.gen import HIERARCHY, make_node
from bench.memtree import allocatable_for
from bench.stats import summary
from cgroupfs import layout
from cgroupfs.convert import V1_UNLIMITED_READBACK
from cgroupfs.layout import RenderOptions
from tests.fakes.fake_cri import FakeContainer, FakeRuntimeService, running_fake_cri

ROOT = Path(__file__).resolve().parents[1]
N_PODS = 1000
IDLE_S = 60.0
EVENTS = 60
READY_TIMEOUT_S = {"pipeline": 120.0, "engine": 40.0}
BUSY_WINDOW_S = 15.0  # CPU window when the first pass is still running (it is all busy time)


def _container_paths(node: Path, raws: list[dict[str, Any]]) -> dict[str, dict[str, Path]]:
    """container ID -> {cgroup file name: path in the fake tree}."""
    from bench.gen import settings_for

    settings = settings_for(node / "cgroupfs", node / "pods.json")
    comp = compute_node([parse_pod(r) for r in raws], settings.compute_config(settings.hugepage_sizes or ()))
    out: dict[str, dict[str, Path]] = {}
    for f in desired_files(comp, HIERARCHY, RenderOptions(), RenderOptions(weight_formula="quadratic")):
        if f.owner is Owner.CONTAINER and f.container_id is not None:
            out.setdefault(f.container_id, {})[f.setting.filename] = node / "cgroupfs" / f.setting.path
    return out


def _fake_runtime(raws: list[dict[str, Any]], paths: dict[str, dict[str, Path]]) -> FakeRuntimeService:
    service = FakeRuntimeService()  # type: ignore[abstract]  # the generated servicer base lists every rpc
    for raw in raws:
        meta = raw["metadata"]
        sandbox = service.add_sandbox(meta["uid"], meta["name"], meta["namespace"])
        for st in raw["status"]["containerStatuses"]:
            service.add_container(sandbox, st["name"], container_id=st["containerID"].split("://", 1)[1])

    def mirror(container: FakeContainer, merged: pb.LinuxContainerResources) -> None:
        files = paths.get(container.id, {})
        memory = merged.memory_limit_in_bytes
        texts = {
            layout.CPU_SHARES: str(merged.cpu_shares) if merged.cpu_shares else None,
            layout.CPU_PERIOD: str(merged.cpu_period) if merged.cpu_period else None,
            layout.CPU_QUOTA: str(merged.cpu_quota) if merged.cpu_quota else None,
            layout.MEMORY_LIMIT: (str(V1_UNLIMITED_READBACK) if memory < 0 else str(memory)) if memory else None,
        }
        for name, text in texts.items():
            if text is not None and name in files:
                files[name].write_text(text + "\n")

    service.on_update = mirror
    return service


def _events(raws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """EVENTS pod updates: Guaranteed pods' first container gets new CPU and memory limits."""
    eligible = [
        r
        for r in raws
        if set(r["spec"]["containers"][0]["resources"]) == {"limits"}
        and not {"initContainers", "overhead", "resources"} & set(r["spec"])
    ]
    out = []
    for k in range(EVENTS):
        raw = copy.deepcopy(eligible[k % len(eligible)])
        limits = raw["spec"]["containers"][0]["resources"]["limits"]
        limits["cpu"], limits["memory"] = (("700m", "300Mi"), ("1300m", "400Mi"))[(k // len(eligible)) % 2]
        out.append(raw)
    return out


def _read_line(stream: IO[str], timeout_s: float) -> dict[str, Any] | None:
    ready, _, _ = select.select([stream], [], [], timeout_s)
    if not ready:
        return None
    line = stream.readline()
    return json.loads(line) if line else None


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _run_one(kind: str, node: Path, config: dict[str, Any], raws: list[dict[str, Any]]) -> dict[str, Any]:
    cfg_file = node / f"config-{kind}.json"
    cfg_file.write_text(json.dumps({**config, "reconciler": kind, "stateDir": str(node / f"state-{kind}")}))
    log = (node / f"daemon-{kind}.log").open("w")
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.daemon_child", str(cfg_file), str(node / "pods.json")],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    out: dict[str, Any] = {"reconciler": kind, "pid": child.pid}
    try:
        proc = psutil.Process(child.pid)
        deadline = time.perf_counter() + READY_TIMEOUT_S[kind]
        ready: dict[str, Any] | None = None
        progress: dict[str, Any] | None = None
        while ready is None and (left := deadline - time.perf_counter()) > 0:
            line = _read_line(child.stdout, left)
            if line is None:
                break
            if "ready" in line:
                ready = line
            elif "progress" in line:
                progress = line
        out["startup_cpu_s"] = _cpu_s(proc)
        out["rss_at_start_mib"] = proc.memory_info().rss / (1 << 20)
        if ready is None:
            out["ready_s"] = None
            out["first_pass_progress"] = progress  # passes done (of 1,001) and when
            if progress:
                out["first_pass_estimate_s"] = progress["at"] * (N_PODS + 1) / max(1, progress["progress"])
        else:
            out["ready_s"] = ready["ready"]
            out["first_pass_count"] = ready["passes"]
            time.sleep(1.0)
        window = IDLE_S if ready is not None else BUSY_WINDOW_S
        per_second: list[float] = []
        cpu0, w0 = _cpu_s(proc), time.perf_counter()
        last = cpu0
        for _ in range(int(window)):
            time.sleep(1.0)
            now = _cpu_s(proc)
            per_second.append(100 * (now - last))
            last = now
        cpu1, w1 = _cpu_s(proc), time.perf_counter()
        out["cpu_window_s"] = w1 - w0
        out["cpu_percent"] = 100 * (cpu1 - cpu0) / (w1 - w0)
        out["cpu_percent_per_second"] = summary(per_second)
        out["rss_idle_mib"] = proc.memory_info().rss / (1 << 20)
        if ready is None:
            out["events"] = "not measured: the daemon had not finished its first pass"
            return out
        pod_s: list[float] = []
        tiers_s: list[float] = []
        missed = 0
        for raw in _events(raws):
            child.stdin.write(json.dumps(raw) + "\n")
            child.stdin.flush()
            got: dict[str, float] = {}
            while len(got) < 2:
                line = _read_line(child.stdout, 30.0)
                if line is None:
                    missed += 1
                    break
                for key in ("pod_s", "tiers_s"):
                    if key in line and line.get("uid") == raw["metadata"]["uid"]:
                        got[key] = line[key]
            if "pod_s" in got:
                pod_s.append(got["pod_s"])
            if "tiers_s" in got:
                tiers_s.append(got["tiers_s"])
            time.sleep(0.05)
        out["event_to_pod_applied_s"] = summary(pod_s) if pod_s else None
        out["event_to_tiers_applied_s"] = summary(tiers_s) if tiers_s else None
        out["events_missed"] = missed
        out["rss_after_events_mib"] = proc.memory_info().rss / (1 << 20)
        return out
    finally:
        try:
            child.stdin.write("\n")
            child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(child.pid, 9)  # our own child, by its PID
            child.wait(timeout=10)
        log.close()


def run(repeat: int = 7) -> dict[str, Any]:
    out: dict[str, Any] = {"pods": N_PODS, "idle_window_s": IDLE_S, "events": EVENTS, "runs": {}}
    for kind in ("pipeline", "engine"):
        print(f"bench: daemon ({kind}) ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:  # a fresh node for each
            node = Path(tmp)
            make_node(node, N_PODS, drift=0.0)
            raws = json.loads((node / "pods.json").read_text())["items"]
            service = _fake_runtime(raws, _container_paths(node, raws))
            out["containers"] = len(service.containers)
            with running_fake_cri(node, service) as cri:
                config = {
                    "cgroupfs": str(node / "cgroupfs"),
                    "pods": str(node / "pods.json"),
                    "allocatable": allocatable_for(parse_pod(r) for r in raws),
                    "qosReserved": {"memory": "50%"},
                    "hugepageSizes": ["2Mi", "1Gi"],
                    "criEndpoint": cri.endpoint,
                    "metricsBindAddress": "127.0.0.1:0",
                    "healthBindAddress": "127.0.0.1:0",
                    "logFormat": "json",
                }
                out["runs"][kind] = _run_one(kind, node, config, raws)
    return out
