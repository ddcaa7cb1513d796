"""Figure 5: the daemon with 1,000 pods — event -> applied latency, RSS and idle CPU (psutil).

A generated node of 1,000 pods is written as a converged fake cgroup tree on disk (real file I/O, not
the kernel's files); the fake CRI server (tests.support.fake_cri) runs in this process and knows every
container, mirroring each UpdateContainerResources into the tree as runc would. The daemon runs in its
own process (`bench.daemon_child`, wired as `agent.daemon.run`), once per kind of node: `bare` (no
kubelet that resizes: the agent owns everything) and `kubelet` (kubeletVersion v1.36: the kubelet
resizes containers and pod cgroups, the agent the tiers). For each: wait until the first full pass is
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from agent.core.compute import compute_node
from agent.core.diff import Owner, desired_files
from agent.cri.v1 import api_pb2 as pb
from agent.pods.parse import parse_pod
from bench.gen import HIERARCHY, make_node
from bench.memtree import allocatable_for
from bench.stats import summary
from cgroupfs import layout
from cgroupfs.convert import V1_UNLIMITED_READBACK
from cgroupfs.layout import RenderOptions
from tests.support.fake_cri.servicer import FakeRuntimeService
from tests.support.fake_cri.serving import running_fake_cri
from tests.support.fake_cri.state import FakeContainer

ROOT = Path(__file__).resolve().parents[1]
N_PODS = 1000
IDLE_S = 60.0
EVENTS = 60
READY_TIMEOUT_S = {"bare": 60.0, "kubelet": 60.0}
NODE_KINDS: dict[str, dict[str, Any]] = {"bare": {}, "kubelet": {"kubeletVersion": "v1.36.0"}}
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


class Lines:
    """JSON lines from a pipe, each within a timeout. Reads the file descriptor itself: select() on a
    buffered text stream misses lines that arrived together with the one before (already in the
    stream's buffer, no longer in the pipe) and would wait out the timeout."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def read(self, timeout_s: float) -> dict[str, Any] | None:
        """The next line, or None at the timeout or at the end of the stream."""
        deadline = time.perf_counter() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.perf_counter()
            if self.eof or left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 16)
            self.eof = not chunk
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line) if line.strip() else self.read(max(0.0, deadline - time.perf_counter()))


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


@dataclass
class Child:
    """A daemon process (`bench.daemon_child`) and the log its stderr goes to."""

    proc: subprocess.Popen[str]
    log: IO[str]
    lines: Lines = field(init=False)

    def __post_init__(self) -> None:
        self.lines = Lines(self.stdout.fileno())  # its lines are read from the descriptor only

    def read_line(self, timeout_s: float) -> dict[str, Any] | None:
        return self.lines.read(timeout_s)

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    @property
    def stdout(self) -> IO[str]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def send(self, obj: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(obj) + "\n")
        self.stdin.flush()


def spawn(kind: str, node: Path, config: dict[str, Any], *extra: str, tag: str = "") -> Child:
    """Start the daemon on a node of `kind` (NODE_KINDS) on `node` (its own config file, state dir and log)."""
    name = f"{kind}{tag}"
    cfg_file = node / f"config-{name}.json"
    cfg_file.write_text(json.dumps({**config, **NODE_KINDS[kind], "stateDir": str(node / f"state-{name}")}))
    log = (node / f"daemon-{name}.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.daemon_child", str(cfg_file), str(node / "pods.json"), *extra],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    return Child(proc, log)


def wait_ready(child: Child, timeout_s: float) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the "ready" line or None when it did not come in time, the last "progress" line)."""
    deadline = time.perf_counter() + timeout_s
    ready: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    while ready is None and (left := deadline - time.perf_counter()) > 0:
        line = child.read_line(left)
        if line is None:
            break
        if "ready" in line:
            ready = line
        elif "progress" in line:
            progress = line
    return ready, progress


def stop_child(child: Child) -> None:
    """An empty line stops the daemon; killed by its PID (our own child) if it does not exit in 30 s."""
    try:
        child.stdin.write("\n")
        child.stdin.close()
    except OSError:
        pass
    try:
        child.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(child.proc.pid, 9)
        child.proc.wait(timeout=10)
    child.log.close()


def _run_one(kind: str, node: Path, config: dict[str, Any], raws: list[dict[str, Any]]) -> dict[str, Any]:
    child = spawn(kind, node, config)
    out: dict[str, Any] = {"node": kind, "pid": child.proc.pid}
    try:
        proc = psutil.Process(child.proc.pid)
        ready, progress = wait_ready(child, READY_TIMEOUT_S[kind])
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
            child.send(raw)
            got: dict[str, float] = {}
            while len(got) < 2:
                line = child.read_line(30.0)
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
        stop_child(child)


@dataclass
class FakeNode:
    """A generated node on disk, its fake CRI runtime serving, and the daemon config for it."""

    dir: Path
    raws: list[dict[str, Any]]
    service: FakeRuntimeService
    config: dict[str, Any]


@contextmanager
def fake_node(qos_reserved: str = "50%") -> Iterator[FakeNode]:
    """N_PODS generated pods on a converged fake cgroup tree in a temporary directory, the fake CRI server
    mirroring container updates into it, and the daemon's config (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="kcg-bench-") as tmp:
        node = Path(tmp)
        make_node(node, N_PODS, drift=0.0)
        raws = json.loads((node / "pods.json").read_text())["items"]
        service = _fake_runtime(raws, _container_paths(node, raws))
        with running_fake_cri(node, service) as cri:
            config = {
                "cgroupfs": str(node / "cgroupfs"),
                "pods": str(node / "pods.json"),
                "allocatable": allocatable_for(parse_pod(r) for r in raws),
                "qosReserved": {"memory": qos_reserved},
                "hugepageSizes": ["2Mi", "1Gi"],
                "criEndpoint": cri.endpoint,
                "metricsBindAddress": "127.0.0.1:0",
                "healthBindAddress": "127.0.0.1:0",
                "logFormat": "json",
            }
            yield FakeNode(node, raws, service, config)


def run(repeat: int = 7) -> dict[str, Any]:
    out: dict[str, Any] = {"pods": N_PODS, "idle_window_s": IDLE_S, "events": EVENTS, "runs": {}}
    for kind in NODE_KINDS:
        print(f"bench: daemon ({kind}) ...", file=sys.stderr, flush=True)
        with fake_node() as fake:  # a fresh node for each
            out["containers"] = len(fake.service.containers)
            out["runs"][kind] = _run_one(kind, fake.dir, fake.config, fake.raws)
    return out
