"""The keeper of the VPA admission parameters against the fake API server: what it writes, updates and
deletes, what it leaves alone while its view is not current, and a failed write tried again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.daemon.vpa_admission import Keeper
from agent.infra.apiserver import APIServer
from agent.infra.metrics import KeeperMetrics
from agent.vpa.admission_cluster import only_targets_moved, targets_within
from agent.vpa.policy import Options
from tests.daemon.harness import Daemon
from tests.e2e_k8s.nodes import wait_for
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.server import FakeAPIServer

VPA = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
PARAMS = ("kube-cgroup-agent.io", "v1alpha1", "vpaadmissionparams")
DEPLOYMENTS = ("apps", "v1", "deployments")
KINDS = [
    ("apps", "v1", "deployments", "Deployment"),
    ("apps", "v1", "statefulsets", "StatefulSet"),
    ("apps", "v1", "daemonsets", "DaemonSet"),
    ("apps", "v1", "replicasets", "ReplicaSet"),
    ("", "v1", "replicationcontrollers", "ReplicationController"),
    ("batch", "v1", "jobs", "Job"),
    ("batch", "v1", "cronjobs", "CronJob"),
]


def deployment(name: str, cpu: str = "100m") -> dict[str, Any]:
    c = {"name": "app", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}, "limits": {"cpu": "200m", "memory": "300Mi"}}}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"template": {"spec": {"containers": [c]}}}}


def vpa(name: str, target: str = "web", opted: bool = True, cpu: str | None = "250m", kind: str = "Deployment") -> dict[str, Any]:
    status = {"recommendation": {"containerRecommendations": [{"containerName": "app", "target": {"cpu": cpu, "memory": "200Mi"}}]}} if cpu else {}
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"} if opted else {}},
        "spec": {"targetRef": {"kind": kind, "name": target}, "updatePolicy": {"updateMode": "Auto"}},
        "status": status,
    }


class Running:
    def __init__(self, cluster: FakeCluster, targets_every_s: float = 0.0) -> None:
        self.cluster = cluster
        self.api = FakeAPIServer(cluster)
        self.api.start()
        cfg = client.Configuration()
        cfg.host = self.api.url
        cfg.connection_pool_maxsize = 16  # as run_keeper sets it: ten watches and the writes
        self.client = client.ApiClient(cfg)
        self.metrics = KeeperMetrics()
        self.keeper = Keeper(APIServer(self.client), self.metrics, Options(), resync_s=0.5, settle_s=0.05,
                             targets_every_s=targets_every_s)
        self.stop = threading.Event()

    def start(self) -> None:
        self.keeper.start(self.stop)

    def close(self) -> None:
        self.stop.set()
        self.keeper.join(5.0)
        self.client.close()
        self.api.stop()

    def param(self) -> dict[str, Any] | None:
        return self.cluster.get(*PARAMS, "ns", "vpa-admission")

    def workload(self, target: str) -> dict[str, Any] | None:
        p = self.param()
        return (p["spec"].get("workloads") or {}).get(target) if p else None

    def skipped(self, vpa: str) -> str | None:
        p = self.param()
        return next((s["reason"] for s in p["spec"].get("skipped") or () if s["vpa"] == vpa), None) if p else None


def served(cluster: FakeCluster, vpas: bool = True, kinds: list[tuple[str, str, str, str]] = KINDS) -> FakeCluster:
    if vpas:
        cluster.serve(*VPA, kind="VerticalPodAutoscaler")
    cluster.serve(*PARAMS, kind="VPAAdmissionParams")
    for g, v, r, k in kinds:
        cluster.serve(g, v, r, k)
    return cluster


@pytest.fixture
def running() -> Iterator[Running]:
    r = Running(served(FakeCluster(node={"metadata": {"name": "n1"}})))
    try:
        yield r
    finally:
        r.close()


def _to(entry: dict[str, Any] | None, key: str = "to") -> str | None:
    return entry["containers"][0][key]["requests"].get("cpu") if entry else None


def test_one_object_per_namespace_kept_up_to_date_and_deleted_with_its_vpas(running: Running) -> None:
    c = running.cluster
    c.put(*DEPLOYMENTS, deployment("web"))
    c.put(*DEPLOYMENTS, deployment("other"))
    c.put(*VPA, vpa("web"))
    c.put(*VPA, vpa("quiet", target="other", opted=False))
    running.start()
    entry = wait_for("the entry of Deployment/web", lambda: running.workload("Deployment/web"), 10)
    assert entry["vpa"] == "web"
    assert entry["containers"][0]["to"] == {"requests": {"cpu": "250m", "memory": str(200 << 20)}, "limits": {"cpu": "500m", "memory": str(600 << 20)}}
    obj = running.param()
    assert obj is not None
    vpa_uid = c.get(*VPA, "ns", "web")["metadata"]["uid"]  # type: ignore[index]
    assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [vpa_uid]
    assert running.workload("Deployment/other") is None and running.skipped("quiet") is None  # no opt-in: not there
    c.put(*VPA, vpa("web", cpu="300m"))  # a new recommendation
    wait_for("the new target", lambda: _to(running.workload("Deployment/web")) == "300m", 10)
    c.put(*DEPLOYMENTS, deployment("web", cpu="150m"))  # a new template: `from` follows it
    wait_for("the new template", lambda: _to(running.workload("Deployment/web"), "from") == "150m", 10)
    c.put(*VPA, vpa("twin"))  # a second VPA of the same Deployment: neither sets anything
    wait_for("both skipped", lambda: running.workload("Deployment/web") is None
             and all("2 VPAs target" in (running.skipped(n) or "") for n in ("web", "twin")), 10)
    c.remove(*VPA, "ns", "twin")
    wait_for("web's entry back", lambda: running.workload("Deployment/web"), 10)
    c.remove(*VPA, "ns", "web")
    wait_for("the object deleted with the namespace's last VPA", lambda: running.param() is None, 10)


def test_nothing_is_written_or_deleted_before_the_vpas_are_known() -> None:
    """The VPA CRD is not served (a cluster without VPA, or the CRD removed): an object left from before
    stays as it is (the garbage collector deletes it with its VPA), none is written."""
    r = Running(served(FakeCluster(node={"metadata": {"name": "n1"}}), vpas=False))
    try:
        r.cluster.put(*PARAMS, {"metadata": {"name": "vpa-admission", "namespace": "ns", "labels": {"kube-cgroup-agent.io/vpa-admission": "true"}},
                                "spec": {"workloads": {}, "skipped": []}})
        r.start()
        wait_for("the keeper's passes wait", lambda: r.cluster.count("GET", "verticalpodautoscalers") >= 2, 10)
        assert r.keeper.passes == 0
        ready, why = r.keeper.readiness()
        assert not ready and why.startswith("waiting for VerticalPodAutoscalers: ") and "LimitRanges" not in why
        assert r.keeper.healthy() == (True, "ok")  # waiting is not failing: no restart
        assert r.param() is not None and r.cluster.count("PATCH", "vpaadmissionparams") == 0
        assert r.cluster.count("DELETE", "vpaadmissionparams") == 0
        r.cluster.serve(*VPA, kind="VerticalPodAutoscaler")  # the CRD installed, no VPA: the stale object goes
        wait_for("the stale object deleted", lambda: r.param() is None, 15)
    finally:
        r.close()


def test_a_kind_that_cannot_be_listed_leaves_its_vpas_objects_alone() -> None:
    r = Running(served(FakeCluster(node={"metadata": {"name": "n1"}}), kinds=KINDS[:-1]))  # no cronjobs
    try:
        r.cluster.put(*VPA, vpa("nightly", target="nightly", kind="CronJob"))
        kept = {"workloads": {"CronJob/nightly": {"vpa": "nightly", "containers": []}}, "skipped": []}
        r.cluster.put(*PARAMS, {"metadata": {"name": "vpa-admission", "namespace": "ns", "labels": {"kube-cgroup-agent.io/vpa-admission": "true"}}, "spec": kept})
        r.cluster.put(*DEPLOYMENTS, deployment("web"), )
        r.cluster.put(*VPA, vpa("web", target="web"))
        r.cluster.put(*VPA, vpa("web2", target="web"))
        r.start()
        # the namespace's object is left as it is while the CronJobs cannot be listed
        wait_for("the keeper's passes", lambda: r.keeper.passes >= 3, 10)
        assert (r.param() or {}).get("spec") == kept
        r.cluster.remove(*VPA, "ns", "nightly")  # no VPA of the unknown kind left: the namespace is written
        wait_for("the namespace's object written", lambda: "2 VPAs target" in (r.skipped("web") or ""), 10)
    finally:
        r.close()


def test_a_failed_write_is_tried_again(running: Running) -> None:
    running.cluster.put(*DEPLOYMENTS, deployment("web"))
    running.cluster.put(*VPA, vpa("web"))
    running.cluster.fail("PATCH", "vpaadmissionparams", 500, times=2)
    running.start()
    wait_for("the parameters written after two failures", lambda: running.workload("Deployment/web"), 15)
    assert running.cluster.count("PATCH", "vpaadmissionparams") >= 3


def _sample(metrics: KeeperMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return None if value is None else float(value)


def test_probes_and_metrics_say_where_the_keeper_stands(running: Running) -> None:
    k, m = running.keeper, running.metrics
    assert k.readiness() == (
        False,
        "waiting for VerticalPodAutoscalers: not listed yet; LimitRanges: not listed yet; "
        "VPAAdmissionParams: not listed yet",
    )
    running.cluster.put(*DEPLOYMENTS, deployment("web"))
    running.cluster.put(*VPA, vpa("web"))
    running.cluster.put(*VPA, vpa("idle", target="other", cpu=None))  # no recommendation: skipped
    running.start()
    wait_for("ready", lambda: k.readiness() == (True, "ok"), 10)
    assert k.healthy() == (True, "ok")
    wait_for("one object applied", lambda: _sample(m, "kube_cgroup_agent_vpa_admission_writes_total", kind="applied"), 10)
    assert _sample(m, "kube_cgroup_agent_vpa_admission_passes_total", outcome="ok") >= 1  # type: ignore[operator]
    assert _sample(m, "kube_cgroup_agent_vpa_admission_workloads") == 1.0
    assert _sample(m, "kube_cgroup_agent_vpa_admission_skipped_vpas") == 1.0
    assert _sample(m, "kube_cgroup_agent_vpa_admission_unreadable_objects") == 0.0
    assert _sample(m, "kube_cgroup_agent_vpa_admission_last_pass_timestamp_seconds") > 1.7e9  # type: ignore[operator]
    running.cluster.remove(*VPA, "ns", "web")
    running.cluster.remove(*VPA, "ns", "idle")
    wait_for("the object deleted", lambda: _sample(m, "kube_cgroup_agent_vpa_admission_writes_total", kind="deleted"), 10)


def test_alive_while_its_threads_run_and_its_loop_turns() -> None:
    now = [1000.0]
    r = Running(served(FakeCluster(node={"metadata": {"name": "n1"}})))
    try:
        r.keeper.clock = lambda: now[0]
        r.start()
        wait_for("a pass", lambda: r.keeper.passes >= 1, 10)
        assert r.keeper.healthy() == (True, "ok")
        now[0] += r.keeper.stuck_after_s + 1  # the loop stopped turning (a fake clock: it turns, at 1000.0)
        healthy, why = r.keeper.healthy()
        assert not healthy and why.startswith("its pass loop has not turned for ")
        now[0] = 1000.0
        r.stop.set()
        r.keeper.join(5.0)
        healthy, why = r.keeper.healthy()
        assert not healthy and why.startswith("stopped: ") and "keeper" in why
    finally:
        r.close()


def test_the_command_serves_its_probes_and_metrics_and_stops_on_sigterm(running: Running, tmp_path: Path) -> None:
    """`kube-cgroup-agent vpa-admission` as the Deployment runs it: its endpoints (one server when both
    addresses are the same), the keeper's metrics and not the node agent's, exit 0 on SIGTERM."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(running.api.kubeconfig())
    running.cluster.put(*DEPLOYMENTS, deployment("web"))
    running.cluster.put(*VPA, vpa("web"))
    any_port = "127.0.0.1:0"
    argv = ["vpa-admission", "--kubeconfig", str(kubeconfig), "--log-format=json", "--resync-period=1s",
            f"--health-bind-address={any_port}", f"--metrics-bind-address={any_port}"]
    keeper = Daemon(kubeconfig, tmp_path / "keeper.log", argv).start()
    try:
        assert keeper.get("/healthz")[0] == 200
        keeper.ready()
        wait_for("the parameters written", lambda: running.workload("Deployment/web"), 10)
        code, text = keeper.get("/metrics")
        assert code == 200
        assert "kube_cgroup_agent_vpa_admission_workloads 1.0" in text and "kube_cgroup_agent_vpa_admission_ready 1.0" in text
        assert "kube_cgroup_agent_build_info{" in text and "kube_cgroup_agent_resize_state_pods" not in text
        assert keeper.terminate() == 0
    finally:
        keeper.stop()


def test_every_vpa_gets_its_target_label_and_a_moved_target_gets_it_again(running: Running) -> None:
    """The label each node's agent watches VPAs by (agent.vpa.target): written on every VPA, opted in or
    not, with a UID precondition; a targetRef changed later gets the new value; nothing else changes."""
    from agent.vpa.target import TARGET_LABEL, target_value

    c = running.cluster
    c.put(*DEPLOYMENTS, deployment("web"))
    c.put(*VPA, vpa("web"))
    c.put(*VPA, vpa("quiet", target="other", opted=False))
    running.start()

    def label(name: str) -> str | None:
        return ((c.get(*VPA, "ns", name) or {}).get("metadata", {}).get("labels") or {}).get(TARGET_LABEL)

    wait_for("both labelled", lambda: label("web") and label("quiet"), 10)
    assert label("web") == target_value("ns", "Deployment", "web")
    assert label("quiet") == target_value("ns", "Deployment", "other")
    patches = c.recorded("PATCH", "/verticalpodautoscalers/")
    assert len(patches) == 2 and all(set(p.body["metadata"]) == {"uid", "labels"} and "spec" not in p.body for p in patches)
    moved = vpa("quiet", target="api", opted=False)
    moved["metadata"]["labels"] = {TARGET_LABEL: label("quiet")}
    c.put(*VPA, moved)
    wait_for("the new target's label", lambda: label("quiet") == target_value("ns", "Deployment", "api"), 10)
    labelled = running.metrics.writes.labels("labelled")
    wait_for("three labels written", lambda: labelled._value.get() == 3, 10)
    sent = len(c.recorded("PATCH", "/verticalpodautoscalers/"))
    passes = running.keeper.passes
    running.keeper.dirty.set()  # another pass: every label is right, nothing more to write
    wait_for("another pass", lambda: running.keeper.passes > passes + 1, 10)
    assert len(c.recorded("PATCH", "/verticalpodautoscalers/")) == sent and labelled._value.get() == 3


def test_a_new_recommendation_alone_waits_for_the_namespaces_next_write_a_new_template_does_not() -> None:
    """The recommender rewrites every VPA's status about once a minute: a namespace's parameters whose only
    change is the recommended values are written at most every `targets_every_s`; a new template (`from`)
    is written at once, or the policy would leave new pods unchanged meanwhile."""
    r = Running(served(FakeCluster(node={"metadata": {"name": "n1"}})), targets_every_s=8.0)
    try:
        c = r.cluster
        c.put(*DEPLOYMENTS, deployment("web"))
        c.put(*VPA, vpa("web"))
        r.start()
        wait_for("the first object", lambda: _to(r.workload("Deployment/web")) == "250m", 10)
        c.put(*VPA, vpa("web", cpu="300m"))  # a new recommendation only
        passes = r.keeper.passes
        wait_for("two passes", lambda: r.keeper.passes >= passes + 2, 10)
        assert _to(r.workload("Deployment/web")) == "250m"  # held back, within the interval
        c.put(*DEPLOYMENTS, deployment("web", cpu="150m"))  # a new template: written now, with the new target
        wait_for("the template and the target", lambda: _to(r.workload("Deployment/web"), "from") == "150m", 6)
        assert _to(r.workload("Deployment/web")) == "300m"
        c.put(*VPA, vpa("web", cpu="350m"))
        wait_for("the held recommendation once the interval has passed", lambda: _to(r.workload("Deployment/web")) == "350m", 20)
    finally:
        r.close()


def test_a_new_recommendation_within_ten_percent_is_not_written_at_all(running: Running) -> None:
    """A recommended value that moved by at most 10 % of what the object holds is left (the keeper's largest
    write at 10,000 VPAs would otherwise be following each move); one beyond is written."""
    c = running.cluster
    c.put(*DEPLOYMENTS, deployment("web"))
    c.put(*VPA, vpa("web"))
    running.start()
    wait_for("the first object", lambda: _to(running.workload("Deployment/web")) == "250m", 10)
    c.put(*VPA, vpa("web", cpu="270m"))  # 8 % up: not written, whatever the interval (0 here)
    passes = running.keeper.passes
    wait_for("three passes", lambda: running.keeper.passes >= passes + 3, 10)
    assert _to(running.workload("Deployment/web")) == "250m"
    c.put(*VPA, vpa("web", cpu="290m"))  # 14 % above what the object holds
    wait_for("the move beyond 10 %", lambda: _to(running.workload("Deployment/web")) == "290m", 10)


@pytest.mark.parametrize(("before", "after", "within"), [
    ({"cpu": "250m", "memory": "256Mi"}, {"cpu": "270m", "memory": "256Mi"}, True),
    ({"cpu": "250m", "memory": "256Mi"}, {"cpu": "250m", "memory": "300Mi"}, False),
    ({"cpu": "250m"}, {"cpu": "250m", "memory": "256Mi"}, False),  # a resource more: written
    ({"cpu": "0"}, {"cpu": "10m"}, False),
    ({"cpu": "1"}, {"cpu": "1000m"}, True),
])
def test_targets_within_compares_each_value_to_the_larger_of_the_two(before: dict[str, str], after: dict[str, str],
                                                                     within: bool) -> None:
    def obj(req: dict[str, str]) -> dict[str, Any]:
        return {"spec": {"workloads": {"Deployment/web": {"containers": [{"name": "app", "to": {"requests": req, "limits": {}}}]}}}}

    assert targets_within(obj(before), obj(after), 0.10) is within


def test_the_pod_levels_to_is_a_target_and_its_from_a_template() -> None:
    def obj(to_cpu: str, from_cpu: str = "200m") -> dict[str, Any]:
        pod = {"from": {"requests": {"cpu": from_cpu}, "limits": {}}, "to": {"requests": {"cpu": to_cpu}, "limits": {}}}
        return {"metadata": {"labels": {}, "ownerReferences": []},
                "spec": {"workloads": {"Deployment/web": {"containers": [], "pod": pod}}}}

    # 8 % and 20 % up at pod level: the first is not written, the second may wait (only a target moved)
    assert targets_within(obj("250m"), obj("270m"), 0.10) and not targets_within(obj("250m"), obj("300m"), 0.10)
    assert only_targets_moved(obj("250m"), obj("300m"))
    assert not only_targets_moved(obj("250m"), obj("250m", from_cpu="300m"))  # a new template: at once


def test_an_applied_object_is_read_whole_before_its_connection_goes_back() -> None:
    """A server-side apply's answer is read whole before its connection goes back to the pool. Given back
    unread over TLS (the body still in the TLS buffer, where urllib3's check for a dropped connection does
    not look), the next request on it read that body as its status line: BadStatusLine, seen in make scale
    as the keeper's apply_failed and label_failed. Plain HTTP (the fake API server) hides it, so the order
    of the calls is what is checked here."""
    calls: list[str] = []

    class Answer:
        def read(self) -> bytes:
            calls.append("read")
            return b"{}"

        def release_conn(self) -> None:
            calls.append("release")

    class Server:
        def request(self, *args: Any, **kw: Any) -> Answer:
            calls.append("request")
            return Answer()

    keeper = Keeper(Server(), KeeperMetrics(), Options())  # type: ignore[arg-type]
    body = {"metadata": {"name": "vpa-admission", "namespace": "ns"}, "spec": {"workloads": {}, "skipped": []}}
    assert keeper._apply(("ns", "vpa-admission"), body)
    assert calls == ["request", "read", "release"]
