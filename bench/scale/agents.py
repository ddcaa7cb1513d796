"""The agents and the keeper as processes: `kube-cgroup-agent run` per simulated node (the .venv's
console script, the node's config, its kubeconfig, localhost metrics and health ports of its own), and
one `kube-cgroup-agent vpa-admission`, the cluster's keeper. Started in sessions of their own, stopped by
their PIDs (SIGTERM, as the kubelet stops a pod)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.scale.controlplane import stop_pid
from bench.scale.metrics import Usage, proc_usage
from bench.scale.nodes import SimNode

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT  # the agent's code the processes run: this tree, or an export of a commit (bench/scale/code.py)


def command() -> list[str]:
    """`kube-cgroup-agent` from CODE: the .venv's Python with CODE first on its path."""
    return [sys.executable, "-m", "agent"]


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    health_port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def usage(self) -> Usage | None:
        return proc_usage(self.pid)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def exited(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def stop(self) -> None:
        stop_pid(self.pid, 30.0)
        self.proc.wait(timeout=30)


def _spawn(name: str, argv: list[str], log: Path, health_port: int) -> Process:
    out = log.open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=CODE, start_new_session=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(CODE), "HOME": str(log.parent)})
    return Process(name, proc, health_port, log)


def start_agent(node: SimNode) -> Process:
    return _spawn(node.name, [
        *command(), "run", "--config", str(node.config), "--node", node.name, "--kubeconfig", str(node.kubeconfig),
        "--metrics-bind-address", f"127.0.0.1:{node.metrics_port}",
        "--health-bind-address", f"127.0.0.1:{node.health_port}", "--log-format", "json"], node.log, node.health_port)


def start_keeper(directory: Path, kubeconfig: Path, metrics_port: int, health_port: int) -> Process:
    directory.mkdir(parents=True, exist_ok=True)
    return _spawn("keeper", [
        *command(), "vpa-admission", "--kubeconfig", str(kubeconfig), "--log-format", "json",
        "--metrics-bind-address", f"127.0.0.1:{metrics_port}", "--health-bind-address", f"127.0.0.1:{health_port}"],
        directory / "keeper.log", health_port)


def wait_ready(procs: list[Process], timeout_s: float) -> dict[str, float]:
    """Seconds until each process answered /readyz; raises when one exits or the time is up."""
    t0 = time.monotonic()
    waiting = {p.name: p for p in procs}
    took: dict[str, float] = {}
    while waiting:
        for name, p in list(waiting.items()):
            if p.exited() is not None:
                tail = p.log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"{name} exited ({p.exited()}) before it was ready:\n{tail}")
            if p.ready():
                took[name] = time.monotonic() - t0
                del waiting[name]
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"not ready after {timeout_s:.0f} s: {sorted(waiting)}")
        time.sleep(0.5)
    return took
