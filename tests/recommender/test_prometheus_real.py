"""The history from a real Prometheus (Debian's `prometheus` package: /usr/bin/prometheus, /usr/bin/promtool):
8 days and 2 hours of cAdvisor-style series backfilled with `promtool tsdb create-blocks-from openmetrics`
into a data directory of the test's own, a Prometheus started on it (no scraping) on 127.0.0.1 at a free port,
and the recommendation after loading from it compared with the one the recommender reaches from the same
samples fed through its normal sample path: equal within one histogram bucket.

The series: each container's CPU counter grows at a rate of its own for each hour (so `rate(...[1h])` at a
whole hour is that hour's rate, exactly), its working set holds a value of its own for each hour; written
every 5 minutes. Beside the node's three containers (one pod name holding a dot) and its two pods' own cgroups
(their pod levels, POD: no container label, no image), series the loader must ignore: a pod (and its pod
cgroup) of a namespace and a pod name both asked about but not that pair, a pod not asked about, the pod's
sandbox (containerd's: no container label but the pause image; dockershim's `"POD"`), and another job's copy of
a container."""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent.core.model import POD
from agent.recommender.config import PrometheusSettings, RecommenderSettings
from agent.recommender.estimate import recommend
from agent.recommender.history import HistoryLoader, http_fetch
from agent.recommender.state import Key, RecommenderState
from agent.recommender.trace import Sample

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
HOUR = 3600
STEP = 300  # the series' scrape interval
DAYS = 8
MINE: tuple[Key, ...] = (("shop/api-7d9f.x", "app"), ("shop/api-7d9f.x", "sidecar"), ("web/front", "nginx"),
                         ("shop/api-7d9f.x", POD), ("web/front", POD))
PAUSE = "registry.k8s.io/pause:3.10"
OTHERS: tuple[tuple[Key, str, str], ...] = (  # (key, job, image)
    (("web/api-7d9f.x", "app"), "kubernetes-cadvisor", ""),  # namespace and pod both asked about, not together
    (("web/api-7d9f.x", POD), "kubernetes-cadvisor", ""),  # and its pod cgroup
    (("shop/other", "app"), "kubernetes-cadvisor", ""),  # a pod not asked about
    (("shop/api-7d9f.x", POD), "kubernetes-cadvisor", PAUSE),  # the sandbox as containerd reports it
    (("shop/api-7d9f.x", "POD"), "kubernetes-cadvisor", PAUSE),  # and as dockershim did
    (("web/front", "nginx"), "node-exporter", ""),  # another job
)

pytestmark = pytest.mark.skipif(
    not (PROMETHEUS.exists() and PROMTOOL.exists()),
    reason="needs Debian's prometheus package (/usr/bin/prometheus and /usr/bin/promtool): apt-get install -y prometheus",
)


def cpu_rate(key: Key, job: str, hour: int, image: str = "") -> float:
    """Cores during the hour starting at `hour` × 3600: mostly low, a spike every tenth hour."""
    r = random.Random(f"cpu {key} {job} {hour}{image}")
    base = {"app": 0.2, "sidecar": 0.05, "nginx": 0.4}.get(key[1], 0.3)
    return round(base * r.uniform(0.5, 1.5) + (0.8 if hour % 10 == 0 else 0.0), 4)


def working_set(key: Key, job: str, hour: int, image: str = "") -> float:
    r = random.Random(f"mem {key} {job} {hour}{image}")
    base = {"app": 200e6, "sidecar": 30e6, "nginx": 120e6}.get(key[1], 90e6)
    return float(int(base * r.uniform(0.8, 1.2)) + (60_000_000 if hour % 24 == 13 else 0))


def labels(key: Key, job: str, image: str) -> str:
    """The kubelet's cAdvisor labels as Prometheus keeps them (no empty one): a pod cgroup has neither
    container nor image, and its id is the pod's."""
    namespace, _, pod = key[0].partition("/")
    cgroup = f"/kubepods/burstable/pod-{pod}"
    if key[1] != POD or image:  # a container's or a sandbox's cgroup is below its pod's
        cgroup += f"/{key[1] or 'sandbox'}"
    kept = {"container": key[1], "id": cgroup, "image": image, "job": job, "namespace": namespace, "pod": pod}
    return ",".join(f'{k}="{v}"' for k, v in kept.items() if v)


def openmetrics(first: int, last: int) -> str:
    out = []
    every = [(k, "kubernetes-cadvisor", "") for k in MINE] + list(OTHERS)
    for key, job, image in every:
        counter = 1000.0
        for t in range(first, last + 1, STEP):
            out.append(f"container_cpu_usage_seconds_total{{{labels(key, job, image)}}} {counter!r} {t}")
            counter += STEP * cpu_rate(key, job, t // HOUR, image)
    for key, job, image in every:
        for t in range(first, last + 1, STEP):
            value = working_set(key, job, t // HOUR, image)
            out.append(f"container_memory_working_set_bytes{{{labels(key, job, image)}}} {value!r} {t}")
    return "\n".join([*out, "# EOF", ""])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def prometheus() -> Iterator[tuple[str, int]]:
    """A Prometheus serving the backfilled series: (its address, the last whole hour written)."""
    end = (int(time.time()) // HOUR - 1) * HOUR
    first = end - DAYS * 86_400 - 2 * HOUR  # the first step's rate reaches an hour back
    root = Path(tempfile.mkdtemp(prefix="kcg-prometheus-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        (root / "series.om").write_text(openmetrics(first, end))
        data = root / "data"
        subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                        str(root / "series.om"), str(data)], check=True, capture_output=True, timeout=300)
        (root / "prometheus.yml").write_text("global: {}\n")
        port = _free_port()
        log = (root / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d",
             f"--web.console.templates={root}", f"--web.console.libraries={root}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=root)
        address = f"http://127.0.0.1:{port}"
        for _ in range(600):
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited {proc.returncode}: {(root / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{address}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("prometheus did not become ready within a minute")
        yield address, end
    finally:
        if proc is not None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _within_a_bucket(a: int, b: int) -> bool:
    return a == b or (min(a, b) > 0 and max(a, b) / min(a, b) <= 1.05 * (1 + 1e-9))


def test_the_history_from_prometheus_gives_the_recommendation_of_the_same_samples_fed_locally(
        prometheus: tuple[str, int]) -> None:
    address, end = prometheus
    prom = PrometheusSettings(address=address, query_timeout_s=60.0, container_pod_name_label="pod",
                              container_name_label="container")
    model = RecommenderSettings(prometheus=prom)
    loader = HistoryLoader(prom, model, http_fetch(address, prom.max_bytes))
    loaded = RecommenderState(model)
    try:
        with capture_logs() as logs:
            loader.feed(loaded, MINE, [], end)
            assert loader.wait(120.0)
            loader.feed(loaded, MINE, [], end)
    finally:
        loader.close()
    [line] = [e for e in logs if e["event"].startswith("recommender.prometheus")]
    # CPU and memory of the 3 containers, the 2 pod cgroups, and web/api-7d9f.x's container and pod cgroup (its
    # namespace and pod name both asked about); neither sandbox
    assert (line["event"], line["found"], line["series"]) == ("recommender.prometheus_history", 5, 14)
    assert sorted(loaded.histories) == sorted(MINE)  # and nothing of the series it had to ignore

    local = RecommenderState(model)  # the same samples, as the sampler hands them: one a step
    start = end - DAYS * 86_400
    for key in MINE:
        for t in range(start, end + 1, HOUR):
            job = "kubernetes-cadvisor"
            local.observe(Sample(float(t), key[0], key[1], cpu=cpu_rate(key, job, (t - HOUR) // HOUR),
                                 memory=working_set(key, job, t // HOUR)))
    for key in MINE:
        got, want = loaded.histories[key], local.histories[key]
        assert (got.samples, got.first_sample, got.last_sample) == (want.samples, want.first_sample, want.last_sample)
        assert got.samples == DAYS * 24 + 1
        containers = 2 if key[0].startswith("shop/") and key[1] != POD else 1  # the pod level has the minimums whole
        a, b = recommend(got, model, containers), recommend(want, model, containers)
        for which in ("target", "lower", "upper"):
            ea, eb = getattr(a, which), getattr(b, which)
            assert _within_a_bucket(ea.cpu_milli, eb.cpu_milli), (key, which, ea, eb)
            assert _within_a_bucket(ea.memory, eb.memory), (key, which, ea, eb)
        assert math.isclose(a.confidence, b.confidence)
