"""Figure 11: a `pods/resize` call -> the container's cgroup written, the agent on a bare node against the
real v1.36 kubelet, on this machine, in the same run (make e2e-k8s; skipped without its cluster).

Kubelet side: a Guaranteed pod on `realk8s-node` (this host, cgroup v1, the kubelet resizes in place).
Agent side: a node with no kubelet that resizes (`kcg-bare`, a Node object whose kubelet is v1.32, so the
agent owns the containers, as on a bare or older node): its pod is a real API pod whose containers run in
`make e2e`'s private containerd under the pod's API UID, and `kube-cgroup-agent run` (a host process, the
admin kubeconfig) watches it. Both pods get the same resizes, interleaved: CPU limit (and request) up,
then down. Timed from just before the PATCH to the first read of the container's `cpu.cfs_quota_us` at
its new value (pread at offset 0 every 0.2 ms in a second thread); the PATCH's own round trip is the API
write, the floor's first part. Writes bench/results/resize_latency.json when KCG_LATENCY_OUT names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench import provenance
from tests.daemon.harness import Daemon, wait_for
from tests.e2e.conftest import E2EEnv, Kernel, PodRunner, api_daemon_config, resources

NEEDS = not (os.environ.get("KCG_CLUSTER") and os.environ.get("KUBECONFIG"))
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(NEEDS, reason="needs the cluster of make e2e-k8s (KCG_CLUSTER=1, KUBECONFIG)"),
]

BARE = "kcg-bare"
KUBELET_NODE = "realk8s-node"
KUBELET_CPU = Path("/sys/fs/cgroup/cpu/realk8s/kubepods")
KUBELET_IMAGE = "docker.io/library/cri-e2e-busybox:1"
NS = "kcg-latency"
ROUNDS = int(os.environ.get("KCG_LATENCY_ROUNDS", "15"))
CPUS = ("100m", "200m")  # Guaranteed: requests follow the limits (small: the suite's pods may still be leaving)
QUOTA = {"100m": "10000", "200m": "20000"}
TOLERATE = [{"key": k, "operator": "Exists", "effect": "NoExecute"}
            for k in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")]


def _core() -> Any:
    from kubernetes import client, config

    config.load_kube_config(os.environ["KUBECONFIG"])
    return client.CoreV1Api()


def _container(cpu: str) -> dict[str, Any]:
    res = {"cpu": cpu, "memory": "32Mi"}
    return {"name": "c", "resources": {"requests": res, "limits": res}}


def _pod(name: str, node: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "tolerations": TOLERATE,
            "containers": [{**_container(CPUS[0]), "image": image, "command": ["/bin/sleep", "1000000"]}],
        },
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bare_node(core: Any) -> None:
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": BARE}})
    capacity = {"cpu": "2", "memory": "8Gi", "pods": "110"}
    status = {
        "capacity": capacity,
        "allocatable": capacity,
        "nodeInfo": {"kubeletVersion": "v1.32.0", "containerRuntimeVersion": "containerd://1.6.20",
                     "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                     "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bare node",
                        "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}],
    }
    core.patch_node_status(BARE, {"status": status})


def _running_status(cid: str, image: str) -> dict[str, Any]:
    res = _container(CPUS[0])["resources"]
    return {"status": {
        "phase": "Running",
        "qosClass": "Guaranteed",
        "startTime": _now(),
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": _now()}
                       for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        "containerStatuses": [{
            "name": "c", "containerID": f"containerd://{cid}", "image": image, "imageID": image,
            "ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": _now()}},
            "allocatedResources": res["requests"], "resources": res,
        }],
    }}


class Watcher(threading.Thread):
    """Reads one cgroup file until it holds `want`; `seen` is the perf_counter of that first read."""

    def __init__(self, path: Path, want: str) -> None:
        super().__init__(daemon=True)
        self.path, self.want = path, want.encode()
        self.seen: float | None = None
        self.error: OSError | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.ready.set()
            deadline = time.perf_counter() + 20
            while time.perf_counter() < deadline:
                try:
                    text = os.pread(fd, 64, 0)
                except OSError as err:  # the container's cgroup went away: the caller says so
                    self.error = err
                    return
                if text.strip() == self.want:
                    self.seen = time.perf_counter()
                    return
                time.sleep(0.0002)
        finally:
            os.close(fd)


def _resize(core: Any, name: str, cpu: str, quota_file: Path) -> tuple[float, float]:
    """(seconds to the container's quota at its new value, seconds of the PATCH itself)."""
    watcher = Watcher(quota_file, QUOTA[cpu])
    watcher.start()
    watcher.ready.wait(5)
    body = {"spec": {"containers": [_container(cpu)]}}
    t0 = time.perf_counter()
    core.patch_namespaced_pod_resize(
        name, NS, body, _content_type="application/strategic-merge-patch+json", _preload_content=False).read()
    patched = time.perf_counter() - t0
    watcher.join(25)
    assert watcher.seen is not None, f"{name}: {quota_file} never read {QUOTA[cpu]} ({watcher.error or 'timeout'})"
    return watcher.seen - t0, patched


@pytest.fixture
def cluster_api() -> Iterator[Any]:
    core = _core()
    from kubernetes.client.exceptions import ApiException

    for gone in (lambda: core.delete_namespace(NS), lambda: core.delete_node(BARE)):
        with contextlib.suppress(ApiException):  # left over from an earlier run, or not there: either is fine
            gone()
    wait_for(lambda: NS not in {n.metadata.name for n in core.list_namespace().items}, "the old namespace gone", 120)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    wait_for(lambda: any(s.metadata.name == "default" for s in core.list_namespaced_service_account(NS).items),
             "the namespace's default ServiceAccount", 60)
    _bare_node(core)
    try:
        yield core
    finally:
        core.delete_namespace(NS, grace_period_seconds=0)
        core.delete_node(BARE)


def test_a_pods_resize_reaches_the_container_cgroup_as_fast_through_the_agent_as_through_the_kubelet(
    cluster_api: Any, e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path
) -> None:
    core = cluster_api
    # the kubelet's pod
    core.create_namespaced_pod(NS, _pod("kubelet-side", KUBELET_NODE, KUBELET_IMAGE))
    kubelet_pod = wait_for(lambda: _running(core, "kubelet-side"), "the kubelet's pod running", 180)
    kubelet_file = KUBELET_CPU / f"pod{kubelet_pod['uid']}" / kubelet_pod["cid"] / "cpu.cfs_quota_us"
    assert kubelet_file.read_text().strip() == QUOTA[CPUS[0]]

    # the agent's pod: in the API on the bare node, its container in the private containerd under its UID
    created = core.create_namespaced_pod(NS, _pod("agent-side", BARE, e2e_env.image))
    uid = created.metadata.uid
    runtime_pod = pods.run({"c": resources(period=100000, quota=10000, shares=102, memory=32 << 20)},
                           qos="guaranteed", name="agent-side", uid=uid)
    core.patch_namespaced_pod_status("agent-side", NS, _running_status(runtime_pod.containers["c"], e2e_env.image))
    config = api_daemon_config(e2e_env, tmp_path, os.environ["KUBECONFIG"], BARE)
    daemon = Daemon(config, tmp_path / "daemon.log").start()
    agent_file = kernel.dir("cpu", runtime_pod.container_cgroup("c")) / "cpu.cfs_quota_us"
    try:
        wait_for(lambda: kernel.read("cpu", runtime_pod.cgroup_parent, "cpu.cfs_quota_us") == QUOTA[CPUS[0]],
                 "the agent's first pass (the pod cgroup's quota)", 60)
        daemon.ready()  # started, as the kubelet is: its start-up work (first passes, lists, the heap) is done
        time.sleep(1.0)
        for name in ("agent-side", "kubelet-side"):  # this client's own first calls, not timed: a dry run
            core.patch_namespaced_pod_resize(name, NS, {"spec": {"containers": [_container(CPUS[1])]}}, dry_run="All",
                                             _content_type="application/strategic-merge-patch+json")
        samples: dict[str, list[float]] = {"agent": [], "kubelet": []}
        patches: dict[str, list[float]] = {"agent": [], "kubelet": []}
        for _ in range(ROUNDS):
            for cpu in (CPUS[1], CPUS[0]):  # up, then down
                for side, name, file in (("agent", "agent-side", agent_file), ("kubelet", "kubelet-side", kubelet_file)):
                    took, patched = _resize(core, name, cpu, file)
                    samples[side].append(took)
                    patches[side].append(patched)
                    time.sleep(0.5)  # the rest of the resize (status, pod cgroup) done before the next one
        assert kernel.read("cpu", runtime_pod.cgroup_parent, "cpu.cfs_quota_us") == QUOTA[CPUS[0]]
    except BaseException:
        print((tmp_path / "daemon.log").read_text()[-6000:])
        raise
    finally:
        daemon.terminate()
    # the agent's own part of each resize: its pass (compute, state record, pod cgroup, the CRI update, the
    # read-back), as it logs it; the rest is the API write and the watch delivery
    passes = [x["duration_ms"] / 1e3 for x in daemon.lines()
              if x.get("event") == "reconcile" and x.get("scope") == "pod" and x.get("writes")][1:]
    restarts = core.read_namespaced_pod("kubelet-side", NS).status.container_statuses[0].restart_count
    assert restarts == 0

    def summary(xs: list[float]) -> dict[str, float]:
        ordered = sorted(xs)
        return {"samples_ms": [round(x * 1e3, 2) for x in xs], "median_ms": statistics.median(xs) * 1e3, "p99_ms": ordered[max(0, round(0.99 * len(xs)) - 1)] * 1e3,
                "min_ms": ordered[0] * 1e3, "max_ms": ordered[-1] * 1e3, "n": len(xs)}

    result: dict[str, Any] = {side: {"resize_to_cgroup": summary(samples[side]), "patch": summary(patches[side])}
                              for side in samples}
    assert len(passes) >= len(samples["agent"]), passes  # one pass at least per resize, each logged
    result["agent"]["pass"] = summary(passes)
    print(f"\nresize -> container cgroup: {json.dumps(result, indent=1)}")
    out = os.environ.get("KCG_LATENCY_OUT")
    if out:
        provenance.record(Path(out), "", lambda data: data.update(
            result, rounds=ROUNDS, cpus=list(CPUS), date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), machine=provenance.machine()))


def _running(core: Any, name: str) -> dict[str, str] | None:
    pod = core.read_namespaced_pod(name, NS)
    assert pod.status.phase != "Failed", f"{name} refused: {pod.status.reason}: {pod.status.message}"
    statuses = pod.status.container_statuses or []
    if pod.status.phase != "Running" or not statuses or not statuses[0].container_id:
        return None
    return {"uid": pod.metadata.uid, "cid": statuses[0].container_id.split("://", 1)[1]}
