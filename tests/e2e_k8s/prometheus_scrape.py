"""Prometheus on this host scraping both kubelets' /metrics/cadvisor through the API server's node proxy,
with a ServiceAccount token allowed only `get` on `nodes/proxy` (tests/e2e_k8s/test_prometheus_history.py says
why not :10250 directly), started by its PID and stopped by it whatever happened."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e_k8s.nodes import NODES, RK, V1_NODE, kubectl, wait_for

PROMETHEUS = Path("/usr/bin/prometheus")
NS = "prom-history"
SA = "kcg-e2e-prometheus"


def host_ip() -> str:
    node = json.loads(kubectl("get", "node", V1_NODE, "-o", "json"))
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


@dataclass
class Scraper:
    address: str
    pid: int
    root: Path

    def queries(self) -> list[dict[str, Any]]:
        """Prometheus's query log: every query it answered, with its parameters."""
        path = self.root / "queries.log"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def range_query(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        form = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
        with urllib.request.urlopen(f"{self.address}/api/v1/query_range", data=form.encode(), timeout=30) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success" and doc["data"]["resultType"] == "matrix", doc
        return list(doc["data"]["result"])

    def stop(self) -> None:
        """SIGTERM by its PID, SIGKILL after 30 s; nothing when it has gone already."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(300):
            try:
                os.waitpid(self.pid, os.WNOHANG)
                os.kill(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                return
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)


def _rbac() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SA},
         "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SA},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SA},
         "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]},
    ]


def _config(root: Path, api: str, token: Path) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "5s", "scrape_timeout": "4s", "evaluation_interval": "1m",
                   "query_log_file": str(root / "queries.log")},
        "scrape_configs": [{
            "job_name": "kubernetes-cadvisor", "scheme": "https",
            "authorization": {"type": "Bearer", "credentials_file": str(token)},
            "tls_config": {"ca_file": str(RK / "state" / "pki" / "ca.crt")},
            "static_configs": [{"targets": [api], "labels": {"node": n}} for n in NODES],
            "relabel_configs": [
                {"source_labels": ["node"], "target_label": "__metrics_path__",
                 "replacement": "/api/v1/nodes/${1}/proxy/metrics/cadvisor"},
                {"source_labels": ["node"], "target_label": "instance"},
            ],
        }],
    }


@contextlib.contextmanager
def scraping() -> Iterator[Scraper]:
    """Prometheus on this host at the host node's InternalIP, scraping both kubelets, both targets up."""
    host = host_ip()
    root = Path(tempfile.mkdtemp(prefix="kcg-e2e-prometheus-"))
    pid: int | None = None
    try:
        for obj in _rbac():
            kubectl("apply", "-f", "-", stdin=json.dumps(obj))
        who = f"system:serviceaccount:{NS}:{SA}"
        assert kubectl("auth", "can-i", "get", "nodes", "--subresource=proxy", "--as", who).strip() == "yes"
        for verb, what in (("get", "nodes"), ("list", "pods"), ("get", "secrets")):  # and nothing else
            assert kubectl("auth", "can-i", verb, what, "--as", who, ok=(0, 1)).strip() == "no", (verb, what)
        token = root / "token"
        token.write_text(kubectl("create", "token", SA, "-n", NS, "--duration=2h").strip())
        token.chmod(0o600)
        (root / "prometheus.yml").write_text(yaml.safe_dump(_config(root, f"{host}:6443", token)))
        port = _free_port(host)
        with (root / "prometheus.log").open("wb") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'data'}",
                 f"--web.listen-address={host}:{port}", "--storage.tsdb.retention.time=1d",
                 f"--web.console.templates={root}", f"--web.console.libraries={root}"],
                stdout=log, stderr=subprocess.STDOUT, cwd=root)
        pid = proc.pid
        scraper = Scraper(f"http://{host}:{port}", pid, root)

        def targets_up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited {proc.returncode}: {(root / 'prometheus.log').read_text()[-2000:]}")
            try:
                active = get_json(f"{scraper.address}/api/v1/targets")["data"]["activeTargets"]
            except OSError:
                return False
            return sorted(t["labels"]["instance"] for t in active if t["health"] == "up") == sorted(NODES)

        try:
            wait_for("both kubelets' cadvisor scraped by Prometheus", targets_up, 120, 1)
        except AssertionError:
            print((root / "prometheus.log").read_text()[-3000:])
            with contextlib.suppress(OSError):
                print(json.dumps(get_json(f"{scraper.address}/api/v1/targets"))[:3000])
            raise
        yield scraper
    finally:
        if pid is not None:
            Scraper("", pid, root).stop()
        for obj in reversed(_rbac()):  # the ServiceAccount goes with its namespace (and the test's workload)
            if obj["kind"] != "ServiceAccount":
                kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found", "--wait=false",
                        ok=(0, 1))
        shutil.rmtree(root, ignore_errors=True)


