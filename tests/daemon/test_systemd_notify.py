"""The daemon under a `Type=notify` unit, without systemd: a real AF_UNIX datagram socket stands in for
$NOTIFY_SOCKET, and the real `kube-cgroup-agent run` (a bare node: pods from a directory, the strict fake
cgroup tree) sends READY=1 after its first full pass, WATCHDOG=1 at half of $WATCHDOG_USEC, STOPPING=1 at
SIGTERM; SIGHUP reads the config file again: refused in one log line when it is not valid (the daemon
goes on with its settings), applied when it is (RELOADING=1, the same PID executed again, READY=1)."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.daemon.harness import Daemon, Env, api_pod, wait_for
from tests.resize.manifests import ctr, manifest


class Systemd:
    """The notify socket's side: every datagram with the time it arrived, collected by a thread."""

    def __init__(self) -> None:
        # a short directory: an AF_UNIX path has at most 107 bytes, pytest's tmp_path can be longer
        self.dir = Path(tempfile.mkdtemp(prefix="kcg-notify-", dir="/tmp"))
        self.path = str(self.dir / "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._done.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            with self._lock:
                self.messages.append((time.monotonic(), fields))

    def got(self, key: str, value: str | None = None) -> list[tuple[float, dict[str, str]]]:
        with self._lock:
            return [(t, m) for t, m in self.messages if key in m and (value is None or m[key] == value)]

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=2)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def systemd() -> Iterator[Systemd]:
    s = Systemd()
    try:
        yield s
    finally:
        s.close()


def _bare_node(env: Env) -> tuple[Path, dict[str, Any]]:
    """One pod "solo" (500m CPU limit) in a manifest directory, as tests/daemon/test_standalone.py."""
    env.node.add_pod(manifest("solo", [ctr("app", lim={"cpu": "500m", "memory": "128Mi"})]))
    pods = env.tmp / "manifests"
    pods.mkdir()
    raw = api_pod(env.node, "solo")
    (pods / "solo.yaml").write_text(yaml.safe_dump(raw))
    return pods, raw


def _start(env: Env, systemd: Systemd, pods: Path, watchdog_usec: int = 400_000, **config: Any) -> Daemon:
    path = env.config(pods=str(pods), kubeconfig=None, nodeName=None, podsPollInterval="50ms", **config)
    d = Daemon(path, env.tmp / "daemon.log", environ={"NOTIFY_SOCKET": systemd.path, "WATCHDOG_USEC": str(watchdog_usec)})
    env.daemons.append(d)
    return d.start()


def _quota(env: Env) -> str:
    return str(env.node.read(f"cpu/{env.node.pods['solo'].pod_dir}/cpu.cfs_quota_us"))


def test_ready_after_the_first_pass_the_watchdog_at_half_its_usec_and_stopping(env: Env, systemd: Systemd) -> None:
    pods, _ = _bare_node(env)
    d = _start(env, systemd, pods)
    ready = wait_for(lambda: systemd.got("READY"), "READY=1")
    assert d.get("/readyz")[0] == 200, "READY=1 is sent once /readyz answers 200"
    assert ready[0][1] == {"READY": "1", "STATUS": "ready: 1 pod"}
    statuses = [m["STATUS"] for _, m in systemd.got("STATUS")]
    assert statuses[0].startswith("starting"), statuses  # what it waited for, before READY
    time.sleep(1.5)
    pings = [t for t, _ in systemd.got("WATCHDOG", "1")]
    after = [t for t in pings if t >= ready[0][0]]
    assert len(after) >= 3, f"{len(after)} pings in 1.5 s at a 0.2 s interval"
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert min(gaps) >= 0.15, f"pinged faster than half of WATCHDOG_USEC: {gaps}"
    assert len(systemd.got("READY")) == 1
    assert d.terminate() == 0
    assert systemd.messages[-1][1] == {"STOPPING": "1", "STATUS": "stopping"}
    assert not systemd.got("RELOADING")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("cgroupRoot: [\n", "is not valid YAML"),
        ("cgroupDrvier: systemd\n", "unknown setting 'cgroupDrvier'"),
        ("resyncPeriod: -5s\n", "resyncPeriod"),
        ("pods: /nonexistent/kcg-manifests\n", "the daemon watches a directory of manifests"),  # valid, cannot start
    ],
    ids=["yaml", "unknown-key", "bad-value", "cannot-start"],
)
def test_sighup_with_a_bad_config_keeps_the_old_settings_and_logs_one_line(
    env: Env, systemd: Systemd, text: str, problem: str
) -> None:
    pods, raw = _bare_node(env)
    d = _start(env, systemd, pods, watchdog_usec=2_000_000)
    wait_for(lambda: systemd.got("READY"), "READY=1")
    wait_for(lambda: _quota(env) == "50000", "the pod's quota")
    good = d.config.read_text()
    d.config.write_text(good + text if "pods:" in text else text)
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGHUP)
    refused = wait_for(lambda: d.logged("config.reload_refused"), "the refusal in the log")
    assert len(refused) == 1 and refused[0]["level"] == "error"
    assert any(problem in p for p in refused[0]["problems"]), refused[0]
    assert refused[0]["config"] == str(d.config)
    wait_for(lambda: any("reload refused" in m["STATUS"] for _, m in systemd.got("STATUS")), "the status line")
    assert d.proc.poll() is None and len(d.logged("started")) == 1, "the same process goes on"
    assert not systemd.got("RELOADING") and not systemd.got("STOPPING")

    # still following its pods with the settings it had
    raw["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1500m", "memory": "256Mi"}}
    (pods / "solo.yaml").write_text(yaml.safe_dump(raw))
    wait_for(lambda: _quota(env) == "150000", "the edited manifest applied")
    assert len(d.logged("config.reload_refused")) == 1
    assert d.terminate() == 0


def test_sighup_with_a_good_config_applies_it_in_the_same_process(env: Env, systemd: Systemd) -> None:
    pods, _ = _bare_node(env)
    d = _start(env, systemd, pods, watchdog_usec=2_000_000)
    wait_for(lambda: systemd.got("READY"), "READY=1")
    wait_for(lambda: _quota(env) == "50000", "the pod's quota")
    assert d.proc is not None
    pid = d.proc.pid

    os.kill(pid, signal.SIGHUP)  # the same file: nothing to do
    wait_for(lambda: d.logged("config.reload", outcome="unchanged"), "the unchanged reload")
    assert not systemd.got("RELOADING")

    config = yaml.safe_load(d.config.read_text())
    config["cpuCFSQuota"] = False  # the kubelet's switch: CPU limits not enforced, quota -1
    d.config.write_text(yaml.safe_dump(config))
    os.kill(pid, signal.SIGHUP)
    wait_for(lambda: len(d.logged("started")) == 2, "the daemon started again")
    reload = d.logged("config.reload", outcome="restarting")
    assert len(reload) == 1 and "cpu_cfs_quota" in reload[0]["changed"]
    wait_for(lambda: len(systemd.got("READY")) == 2, "READY=1 from the reloaded process")
    reloading = systemd.got("RELOADING", "1")
    assert len(reloading) == 1 and int(reloading[0][1]["MONOTONIC_USEC"]) > 0
    assert reloading[0][0] <= systemd.got("READY")[1][0]
    assert d.proc.poll() is None and d.proc.pid == pid
    assert [x.get("reason") for x in d.logged("stopped")] == ["reload"], "flushed as at SIGTERM first"
    wait_for(lambda: _quota(env) == "-1", "the new setting applied to the pod")
    assert not systemd.got("STOPPING")
    assert d.terminate() == 0
    assert systemd.messages[-1][1]["STOPPING"] == "1"
