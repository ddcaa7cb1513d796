"""The daemon under test, shared by the daemon tests and the reliability harness (a plain module, not a
conftest, so `python -m tests.reliability` runs without pytest): the real `kube-cgroup-agent run` in a
subprocess, against
- a fake API server on 127.0.0.1 (tests/support/fakeapi/) speaking HTTP to the real kubernetes client,
- a strict fake cgroup tree and the fake CRI server mirroring updates into it (tests/resize/harness.py's
  ResizeNode plays the kubelet and runc: it creates pod and container cgroups and containers),
and helpers that wait for a condition (never for a duration) and read the daemon's JSON log.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.resize.harness import ResizeNode
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.node import NODE, node_object
from tests.support.fakeapi.server import FakeAPIServer

REPO = Path(__file__).resolve().parents[2]
CONDITION = "kube-cgroup-agent.io/ResizeApplied"


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll until `predicate()` is truthy; the deadline only bounds a hang, nothing asserts on time.
    A fake cgroup file read while the daemon rewrites it can be empty for an instant (the fake tree is
    a regular file: truncate, then write): that read is not an answer yet, so it is polled again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except ValueError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def api_pod(node: ResizeNode, name: str) -> dict[str, Any]:
    """The pod as the API server would return it: the harness's view of it (status with the container IDs
    and what a kubelet that resizes reports it admitted), plus spec.nodeName and restart counts."""
    raw = copy.deepcopy(node.raw(name))
    raw["spec"]["nodeName"] = NODE
    for status in raw["status"]["containerStatuses"]:
        status["restartCount"] = 0
    return raw


class Daemon:
    """One `kube-cgroup-agent run` process (or the command `argv` names); stopped by its PID."""

    def __init__(
        self, config: Path, log: Path, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self.argv = list(argv) if argv is not None else ["run", "--config", str(config)]
        self.environ = dict(environ or {})  # added to this process's environment (NOTIFY_SOCKET, ...)
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None
        self._offset = 0
        self._endpoint: str | None = None

    def start(self) -> Daemon:
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._endpoint = None
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent", *self.argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.environ},
            )
        return self

    def lines(self) -> list[dict[str, Any]]:
        """This run's JSON log lines (anything else, like a traceback, is kept under "raw")."""
        out = []
        with self.log_path.open("rb") as f:
            f.seek(self._offset)
            for line in f.read().decode(errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    out.append({"raw": line})
        return out

    def logged(self, event: str, **match: Any) -> list[dict[str, Any]]:
        return [
            x for x in self.lines() if x.get("event") == event and all(x.get(k) == v for k, v in match.items())
        ]

    def endpoint(self) -> str:
        """The health/metrics address from the "listening" line (the endpoints answer before the daemon
        has its node), read once per run (the log of a long run is large: it is not parsed again for every
        request)."""
        if self._endpoint is None:
            listening = wait_for(lambda: self.logged("listening"), "the daemon's endpoints")
            self._endpoint = str(listening[0]["endpoints"][0])
        return self._endpoint

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint()}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def ready(self) -> None:
        wait_for(lambda: self.get("/readyz")[0] == 200, "/readyz to answer 200")

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM if still running; SIGKILL when it has not exited by the end of terminate's wait."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.terminate()
            except subprocess.TimeoutExpired:
                self.kill()


class Env:
    """Everything one daemon test needs, with a config writer."""

    def __init__(self, tmp: Path, node: ResizeNode, cluster: FakeCluster, api: FakeAPIServer, cri: FakeCRI) -> None:
        self.tmp = tmp
        self.node = node
        self.cluster = cluster
        self.api = api
        self.cri = cri
        self.daemons: list[Daemon] = []

    def config(self, **overrides: Any) -> Path:
        kubeconfig = self.tmp / "kubeconfig"
        kubeconfig.write_text(self.api.kubeconfig())
        cfg: dict[str, Any] = {
            "cgroupfs": str(self.node.tree.root),
            "cgroupVersion": "1",
            "cgroupRoot": "/",
            "hugepageSizes": [],
            "stateDir": str(self.tmp / "state"),
            "criEndpoint": self.cri.endpoint,
            "kubeconfig": str(kubeconfig),
            "nodeName": NODE,
            "metricsBindAddress": "127.0.0.1:0",
            "healthBindAddress": "127.0.0.1:0",
            "resyncPeriod": "60s",
            "logFormat": "json",
            "logLevel": "debug",
        }
        cfg.update(overrides)
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def daemon(self, **overrides: Any) -> Daemon:
        d = Daemon(self.config(**overrides), self.tmp / "daemon.log")
        self.daemons.append(d)
        return d.start()

    def publish(self, name: str) -> dict[str, Any]:
        pod = api_pod(self.node, name)
        self.cluster.apply(pod)
        return pod

    def uid(self, name: str) -> str:
        return str(self.node.pods[name].raw["metadata"]["uid"])


@contextmanager
def serving(
    tmp: Path, node: ResizeNode, cri: FakeCRI, node_obj: dict[str, Any] | None = None, *, graceful: bool = False
) -> Iterator[Env]:
    """The fake API server for `node` (the Node object `node_obj`, node_object() by default) and an Env;
    afterwards every daemon still running is stopped by its PID (SIGTERM first when `graceful`), the
    server too, and the node's CRI client closed."""
    cluster = FakeCluster(node=node_obj or node_object())
    api = FakeAPIServer(cluster)
    api.start()
    e = Env(tmp, node, cluster, api, cri)
    try:
        yield e
    finally:
        for d in e.daemons:
            if graceful:
                d.stop()
            else:
                d.kill()
        api.stop()
        node.close()
