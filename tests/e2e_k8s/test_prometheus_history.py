"""The recommender's history from a real Prometheus (Debian's `prometheus`, on this host, by PID, its TSDB in a
temporary directory) scraping the real kubelets' `/metrics/cadvisor` of both nodes every 5 s, job
`kubernetes-cadvisor`.

How it scrapes: these kubelets authenticate x509 client certificates only (`webhook: {enabled: false}` in
both kubelet configurations), so a ServiceAccount token sent to :10250 is refused. Prometheus scrapes each
kubelet through the API server's node proxy instead (`/api/v1/nodes/<node>/proxy/metrics/cadvisor`, as
Prometheus's own Kubernetes example does), with a token of a ServiceAccount the test makes, allowed only
`get` on `nodes/proxy` (the permission that path asks; `nodes/metrics` is what a kubelet's own webhook
authorizer would ask), and the cluster CA; all deleted afterwards.

The agent on realk8s-v2 (the test turns its recommender on in the agents' ConfigMap with
`recommender.prometheus` pointing at the host's Prometheus, at realk8s-node's InternalIP, which both nodes'
pods reach, and restores the shipped one afterwards; only that node's agent is restarted) records a steady container (a busy loop under
a 200m limit, 40 MiB in /dev/shm) for some minutes while Prometheus scrapes. Then the agent goes (a label
the test cluster's DaemonSet avoids), its state file is wiped, and a new one starts with no history of the
container: it loads the container's history from Prometheus (historyLength 30m, historyResolution 1m). The
recommendation of the history it then publishes (its NodeHistory) is compared with the one the recommender
reaches from the same samples (the test asks Prometheus the agent's own two queries, as Prometheus's query
log recorded them, and feeds the answer to agent.recommender's model), with the independent reference of
tests/recommender/test_model.py on those samples, and with the history the first agent recorded locally:
each within one histogram bucket. Beside it the same container with its values at pod level: the new agent
loads that pod's pod-cgroup history from Prometheus too (from minutes before it started), its targets
within a bucket of the first agent's. Last, Prometheus stopped: a new pod's history cannot be loaded, the agent
logs one line and stays Ready.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import yaml

from agent.config.settings import from_mapping
from agent.core.model import POD
from agent.recommender import wire
from agent.recommender.config import BUCKET_GROWTH, CPU_FIRST_BUCKET, MEMORY_FIRST_BUCKET, RecommenderSettings
from agent.recommender.estimate import Recommendation, recommend
from agent.recommender.model import ContainerHistory
from agent.recommender.podlevel import pod_entry
from agent.recommender.state import RecommenderState
from agent.recommender.trace import Sample
from tests.e2e_k8s.nodes import (
    AGENT_LABEL,
    AGENT_NS,
    IMAGE,
    NODES,
    V2_NODE,
    NodeAgent,
    agent_ready,
    kubectl,
    needs_cluster,
    node_exec,
    wait_for,
)
from tests.e2e_k8s.prometheus_scrape import NS, PROMETHEUS, Scraper, get_json, scraping
from tests.recommender.test_model import ref_bucket, ref_bucket_end, ref_percentile

pytestmark = [needs_cluster, pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus package")]
# the workload's and the restarted agent's node: the guest, whose kubelet's cAdvisor reads containerd at its
# standard socket, so its container series carry `pod` and `container`; the host node's containerd (the CRI
# kit's) listens elsewhere, and its cAdvisor series stop at the pod (`container=""`, as with no runtime)
NODE = V2_NODE
NAME = "steady"
POD_LEVEL = "steady-pod"  # the same container, its values at pod level
RUN_S = float(os.environ.get("KCG_PROM_HISTORY_S", "420"))  # recorded before the agent restarts
STATE_FILE = "/var/lib/kube-cgroup-agent/recommender.json"  # the DaemonSet's state hostPath


@pytest.fixture(scope="module")
def scraper() -> Iterator[Scraper]:
    with scraping() as it:
        yield it


def _recommender(address: str) -> dict[str, Any]:
    return {"enabled": True, "sampleInterval": "1s", "recommenderInterval": "10s",
            # the pod minimums (25m, 250 MiB) would hide the histories behind them
            "podRecommendationMinCpuMillicores": 1, "podRecommendationMinMemoryMb": 1,
            "prometheus": {"address": address, "queryTimeout": "30s", "historyLength": "30m",
                           "historyResolution": "1m", "containerPodNameLabel": "pod", "containerNameLabel": "container"}}


def _agent_gone(node: str) -> bool:
    pods = json.loads(kubectl("get", "pods", "-n", AGENT_NS, "-l", AGENT_LABEL, "--field-selector",
                              f"spec.nodeName={node}", "-o", "json"))["items"]
    return not pods


def _restart_agent(node: str, wipe: bool = False) -> float:
    """The node's agent goes (its pod deleted, none back while the label is on), the recommender's state
    file with it when `wipe`, and a new one starts; returns when it went (UNIX time)."""
    kubectl("label", "node", node, "kcg-e2e/no-agent=1", "--overwrite")
    try:
        wait_for(f"no agent on {node}", lambda: _agent_gone(node), 180, 1)
        if wipe:
            node_exec(node, "rm", "-f", STATE_FILE)
        went = time.time()
    finally:
        kubectl("label", "node", node, "kcg-e2e/no-agent-", ok=(0, 1))
    wait_for(f"the agent on {node} Ready", lambda: agent_ready(node), 300, 1)
    return went


@pytest.fixture(scope="module")
def recommender_on(scraper: Scraper) -> Iterator[RecommenderSettings]:
    """The v2 node's agent with the recommender on and the host's Prometheus as its history."""
    cm = json.loads(kubectl("get", "configmap", "kube-cgroup-agent", "-n", AGENT_NS, "-o", "json"))
    shipped = cm["data"]["config.yaml"]
    recommender = _recommender(scraper.address)
    config = yaml.safe_load(shipped) | {"recommender": recommender}
    patch = {"data": {"config.yaml": yaml.safe_dump(config, sort_keys=False)}}
    kubectl("patch", "configmap", "kube-cgroup-agent", "-n", AGENT_NS, "--type", "merge", "-p", json.dumps(patch))
    try:
        _restart_agent(NODE)
        reach = ("import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + '/-/ready', timeout=10).status)")
        for node in NODES:  # the agents' pods reach the host's Prometheus at the node's IP (printed for both)
            got = NodeAgent(node).exec("python3", "-c", reach, scraper.address, ok=(0, 1))
            print(f"\ne2e-k8s: {node}'s agent pod -> {scraper.address}: {got.strip() or 'unreachable'}")
            assert node != NODE or got.strip() == "200"
        yield from_mapping({"recommender": recommender}).recommender
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", ok=(0, 1))
        restore = {"data": {"config.yaml": shipped}}
        kubectl("patch", "configmap", "kube-cgroup-agent", "-n", AGENT_NS, "--type", "merge", "-p", json.dumps(restore))
        _restart_agent(NODE)


def _workload(name: str, vpa: bool = True, pod_level: bool = False) -> list[dict[str, Any]]:
    """The steady container; `pod_level`: its values as the pod's (`spec.resources`), the container none."""
    labels = {"app": name}
    script = "dd if=/dev/zero of=/dev/shm/fill bs=1M count=40 2>/dev/null; while :; do :; done"
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}
    app: dict[str, Any] = {"name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]}
    spec = {"terminationGracePeriodSeconds": 1, "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [app], **({"resources": resources} if pod_level else {})}
    if not pod_level:
        app["resources"] = resources
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }
    out = [deployment]
    if vpa:
        out.append({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                             "recommenders": [{"name": "kube-cgroup-agent"}], "updatePolicy": {"updateMode": "Off"}}})
    return out


def _running_pod(name: str) -> str | None:
    pods = json.loads(kubectl("get", "pods", "-n", NS, "-l", f"app={name}", "-o", "json"))["items"]
    running = [p["metadata"]["name"] for p in pods if p.get("status", {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")]
    return running[0] if len(running) == 1 else None


def _published(settings: RecommenderSettings, after: float = 0.0, entry: str = f"{NS}/{NAME}",
               container: str = "app") -> tuple[float, ContainerHistory] | None:
    """The node's published history of the VPA's container (or, `entry` pod_entry(...) and container POD,
    its pod level), when its NodeHistory was written after `after`."""
    doc = json.loads(kubectl("get", "nodehistories", NODE, "-o", "json", ok=(0, 1)) or "{}")
    spec = doc.get("spec") or {}
    text = ((spec.get("vpas") or {}).get(entry) or {}).get("containers", {}).get(container)
    updated = datetime.fromisoformat(spec["updated"].replace("Z", "+00:00")).timestamp() if spec.get("updated") else 0.0
    if text is None or updated <= after:
        return None
    return updated, wire.decode(settings, text)


def _unix(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _reference(cpu: list[tuple[float, float]], memory: list[tuple[float, float]], s: RecommenderSettings) -> dict[str, int]:
    """VPA's estimator on the samples, written from its rules (tests/recommender/test_model.py's percentile):
    CPU samples of weight 0.1; memory the peak of the one 24 h interval these minutes fall in; a margin of
    15 %; bounds by the confidence min(span, samples / 1440) in days; the pod minimums of the settings."""
    day = 86_400.0
    weighted = [(v, 0.1, t) for t, v in cpu]
    peak = max(v for _, v in memory)
    conf = min((cpu[-1][0] - cpu[0][0]) / day, len(cpu) / 1440)

    def margin(x: float) -> int:
        return int(x) + int(int(x) * 0.15)

    def c(p: float) -> int:
        return margin(ref_percentile(weighted, p, CPU_FIRST_BUCKET) * 1000)

    m = margin(ref_bucket_end(ref_bucket(peak, MEMORY_FIRST_BUCKET), MEMORY_FIRST_BUCKET))
    min_cpu, min_mem = int(s.pod_recommendation_min_cpu_millicores), int(s.pod_recommendation_min_memory_mb * 2**20)
    return {"target_cpu": max(c(0.9), min_cpu), "target_memory": max(m, min_mem),
            "lower_cpu": max(int(c(0.5) * (1 + 0.001 / conf) ** -2), min_cpu),
            "upper_cpu": max(int(c(0.95) * (1 + 1 / conf)), min_cpu),
            "lower_memory": max(int(m * (1 + 0.001 / conf) ** -2), min_mem),
            "upper_memory": max(int(m * (1 + 1 / conf)), min_mem)}


def _flat(r: Recommendation) -> dict[str, int]:
    return {"target_cpu": r.target.cpu_milli, "target_memory": r.target.memory, "lower_cpu": r.lower.cpu_milli,
            "upper_cpu": r.upper.cpu_milli, "lower_memory": r.lower.memory, "upper_memory": r.upper.memory}


def _buckets(a: float, b: float) -> float:
    """How many histogram buckets apart two amounts are (their ratio in buckets of 5 %)."""
    return 0.0 if a == b else math.inf if min(a, b) <= 0 else math.log(max(a, b) / min(a, b)) / math.log(1 + BUCKET_GROWTH)


def _history_lines(node: str, since_s: float) -> list[dict[str, Any]]:
    return [e for e in NodeAgent(node).lines(since_s) if str(e.get("event", "")).startswith("recommender.prometheus_history")]


def test_the_history_from_prometheus_gives_the_recommendation_of_the_same_samples(
        scraper: Scraper, recommender_on: RecommenderSettings) -> None:
    settings = recommender_on
    for obj in [*_workload(NAME), *_workload(POD_LEVEL, pod_level=True)]:
        kubectl("apply", "-f", "-", stdin=json.dumps(obj))
    pod = wait_for(f"the {NAME} pod running on {NODE}", lambda: _running_pod(NAME), 120, 1)
    pl_pod = wait_for(f"the {POD_LEVEL} pod running on {NODE}", lambda: _running_pod(POD_LEVEL), 120, 1)
    pl_entry = pod_entry(f"{NS}/{POD_LEVEL}")
    t_start = time.time()
    series = f'{{job="kubernetes-cadvisor", namespace="{NS}", pod="{pod}", container="app"}}'
    wait_for("the container's series in Prometheus", lambda: get_json(
        f"{scraper.address}/api/v1/query?query=" + urllib.parse.quote(f"container_cpu_usage_seconds_total{series}"))["data"]["result"], 60, 2)
    time.sleep(max(0.0, t_start + RUN_S - time.time()))
    _, local = wait_for("the history the agent recorded itself", lambda: _published(settings, t_start + RUN_S - 30), 60, 2)
    _, pl_local = wait_for("the pod level's history the agent recorded itself",
                           lambda: _published(settings, t_start + RUN_S - 30, pl_entry, POD), 60, 2)

    went = _restart_agent(NODE, wipe=True)  # a new agent, no history: the container's comes from Prometheus
    t_loaded = time.monotonic()
    updated, loaded = wait_for("the agent's first NodeHistory after the load", lambda: _published(settings, went), 180, 1)
    waited_s = time.monotonic() - t_loaded
    _, pl_loaded = wait_for("the pod level's history after the load", lambda: _published(settings, went, pl_entry, POD), 60, 1)
    lines = _history_lines(NODE, time.time() - went + 5)
    assert lines and all(e["event"] == "recommender.prometheus_history" for e in lines), lines
    assert sum(e["found"] for e in lines) >= 1

    asked = [q for q in scraper.queries() if "pod=~" in q["params"]["query"] and pod in q["params"]["query"]
             and _unix(q["params"]["end"]) >= went]
    by_kind = {("cpu" if q["params"]["query"].startswith("rate(") else "memory"): q["params"] for q in asked}
    assert set(by_kind) == {"cpu", "memory"}, asked
    points: dict[str, list[tuple[float, float]]] = {}
    for kind, params in by_kind.items():  # the agent's own two queries, asked again by the test
        matrix = scraper.range_query(params["query"], _unix(params["start"]), _unix(params["end"]), float(params["step"]))
        [one] = [m for m in matrix if m["metric"].get("pod") == pod and m["metric"].get("container") == "app"]
        points[kind] = [(float(t), float(v)) for t, v in one["values"]]
    cpu, memory = points["cpu"], points["memory"]

    state = RecommenderState(settings)  # the same samples through agent.recommender's model
    state.observe_all(sorted([Sample(t, f"{NS}/{pod}", "app", cpu=v) for t, v in cpu]
                             + [Sample(t, f"{NS}/{pod}", "app", memory=v) for t, v in memory], key=lambda s: s.ts))
    same = state.histories[(f"{NS}/{pod}", "app")]
    rec = {"prometheus (agent)": _flat(recommend(loaded, settings, 1)),
           "same samples (model)": _flat(recommend(same, settings, 1)),
           "same samples (reference)": _reference(cpu, memory, settings),
           "recorded locally": _flat(recommend(local, settings, 1))}
    print(f"\ne2e-k8s: Prometheus history of {NS}/{pod}/app: {len(cpu)} CPU and {len(memory)} memory points over "
          f"{(cpu[-1][0] - cpu[0][0]) / 60:.1f} min (CPU {min(v for _, v in cpu):.4f}-{max(v for _, v in cpu):.4f} cores, "
          f"working set peak {max(v for _, v in memory) / 2**20:.1f} MiB); the agent published it {waited_s:.1f} s after "
          f"it was Ready again (NodeHistory {updated - went:.1f} s after the old agent went)")
    for name, r in rec.items():
        print(f"e2e-k8s:   {name:26} " + ", ".join(f"{k} {v}" for k, v in r.items()))

    # the loaded history is Prometheus's: it starts minutes before this agent, with at least its points
    assert loaded.first_sample is not None and loaded.first_sample <= went - RUN_S / 2
    assert loaded.first_sample == cpu[0][0] and loaded.samples >= len(cpu)
    assert len(cpu) >= RUN_S / 60 - 2
    model, ref, agent = rec["same samples (model)"], rec["same samples (reference)"], rec["prometheus (agent)"]
    for key in model:
        assert _buckets(model[key], ref[key]) <= 1, (key, model[key], ref[key])
    # the agent's history has its own samples after the load (one recommender interval at most): the same
    # usage, and a span longer by as much, which widens the confidence the bounds are scaled by
    assert loaded.last_sample is not None and same.last_sample is not None
    span = (loaded.last_sample - loaded.first_sample) / (same.last_sample - cpu[0][0])
    for key in agent:
        allowed = 1 + (math.log(span) / math.log(1 + BUCKET_GROWTH) if key.startswith("upper") else 0)
        assert _buckets(agent[key], model[key]) <= allowed, (key, agent[key], model[key], span)
    for key in ("target_cpu", "target_memory"):  # what the first agent reached from its own samples
        assert _buckets(rec["recorded locally"][key], agent[key]) <= 1, (key, rec["recorded locally"][key], agent[key])
    # the pod level's history is its pod cgroup's from Prometheus too (the series without a container and
    # image), from minutes before this agent; its targets those the first agent reached from its own samples
    pl_rec, pl_was = _flat(recommend(pl_loaded, settings, 1)), _flat(recommend(pl_local, settings, 1))
    print(f"e2e-k8s:   pod level of {NS}/{pl_pod}: loaded from {(went - (pl_loaded.first_sample or went)) / 60:.1f} min "
          f"before the agent, {pl_loaded.samples} samples; targets {pl_rec['target_cpu']}m/{pl_rec['target_memory'] >> 20}Mi "
          f"(recorded locally {pl_was['target_cpu']}m/{pl_was['target_memory'] >> 20}Mi)")
    assert pl_loaded.first_sample is not None and pl_loaded.first_sample <= went - RUN_S / 2, (pl_loaded.first_sample, went)
    for key in ("target_cpu", "target_memory"):
        assert _buckets(pl_was[key], pl_rec[key]) <= 1, (key, pl_was[key], pl_rec[key])
    print("e2e-k8s:   buckets apart (agent vs model, model vs reference, local vs agent targets): "
          + ", ".join(f"{k} {_buckets(agent[k], model[k]):.2f}/{_buckets(model[k], ref[k]):.2f}" for k in model)
          + f"; targets local {_buckets(rec['recorded locally']['target_cpu'], agent['target_cpu']):.2f} cpu, "
          f"{_buckets(rec['recorded locally']['target_memory'], agent['target_memory']):.2f} memory; span ratio {span:.3f}")


def test_prometheus_stopped_gives_one_line_and_the_agent_stays_ready(
        scraper: Scraper, recommender_on: RecommenderSettings) -> None:
    scraper.stop()
    t0 = time.time()
    for obj in _workload(f"{NAME}-later", vpa=False):  # a container the agent has never seen
        kubectl("apply", "-f", "-", stdin=json.dumps(obj))
    wait_for(f"the {NAME}-later pod running", lambda: _running_pod(f"{NAME}-later"), 120, 1)

    def failed() -> list[dict[str, Any]] | None:
        return [e for e in _history_lines(NODE, time.time() - t0 + 5) if _unix(e["timestamp"]) >= t0] or None

    lines = wait_for("the agent's line about the failed load", failed, 90, 2)
    time.sleep(15)  # and nothing more comes, the agent Ready throughout
    lines = failed() or []
    assert [e["event"] for e in lines] == ["recommender.prometheus_history_failed"], lines
    assert lines[0]["address"] == scraper.address and "cannot reach" in lines[0]["error"], lines[0]
    assert agent_ready(NODE)
    statuses = NodeAgent(NODE).pod()["status"]["containerStatuses"]
    assert [c["restartCount"] for c in statuses if c["name"] == "agent"] == [0]
    print(f"\ne2e-k8s: Prometheus stopped: {lines[0]['event']}: {lines[0]['error']}; the agent Ready, 0 restarts")
