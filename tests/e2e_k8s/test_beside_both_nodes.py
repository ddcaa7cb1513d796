"""Five minutes beside the kubelet on both nodes, the agent as its DaemonSet (make e2e-k8s).

Arrivals, resizes up and down and departures on each node, through the kubelet's 60 s QoS passes; on the
systemd node two `systemctl daemon-reload`s and a `systemctl restart containerd`. Counted per node:
- fights: values the agent found changed by someone else (kube_cgroup_agent_drift_total, before → after);
- kubelet-owned writes: pod or container paths among what the agent logged it changed;
- reverted after daemon-reload: the agent's tier values that a daemon-reload put back;
- the tier's move after each event (its cpu file, read on the node), and the diff converged at the end.
KCG_BESIDE_S shortens or lengthens the run (300 s by default).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import provenance
from tests.e2e_k8s.nodes import (
    IMAGE,
    NODES,
    V1_NODE,
    V2_NODE,
    NodeAgent,
    compare,
    kubectl,
    needs_cluster,
    node_exec,
    pod_uid,
    read_files,
    short,
    wait_for,
)

pytestmark = needs_cluster
NS = "beside"
DURATION_S = float(os.environ.get("KCG_BESIDE_S", "300"))
TIER_CPU = {
    V1_NODE: "/sys/fs/cgroup/cpu/realk8s/kubepods/burstable/cpu.shares",
    V2_NODE: "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight",
}
SYSTEMD_FAULTS = ((0.3, "daemon-reload"), (0.55, "restart-containerd"), (0.8, "daemon-reload"))


@dataclass
class NodeRun:
    node: str
    agent: NodeAgent
    drift_before: float
    started: float = field(default_factory=time.monotonic)
    events: int = 0
    tier_s: list[float] = field(default_factory=list)
    reverted: int = 0
    reloads: int = 0
    containerd_restarts: int = 0
    serial: int = 0
    alive: list[str] = field(default_factory=list)  # pods this run made that still exist
    cpu_milli: dict[str, int] = field(default_factory=dict)


def _pod(run: NodeRun, name: str, cpu: int) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"beside": "yes"}},
        "spec": {"nodeName": run.node, "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
            "resources": {"requests": {"cpu": f"{cpu}m", "memory": "16Mi"},
                          "limits": {"cpu": f"{2 * cpu}m", "memory": "64Mi"}}}]}})


def _tier(node: str) -> str | None:
    return read_files(node, [TIER_CPU[node]])[TIER_CPU[node]]


def _tier_moves(run: NodeRun, before: str | None) -> None:
    """The Burstable tier's CPU value leaves `before` (the agent's write: the kubelet's own pass may be a
    minute away); the time it took is kept for the figure."""
    t0 = time.monotonic()
    wait_for(f"the Burstable tier on {run.node} to move from {before}", lambda: _tier(run.node) != before, 120, 0.2)
    run.tier_s.append(time.monotonic() - t0)


def _running(run: NodeRun, name: str, namespace: str = NS) -> bool:
    pod = json.loads(kubectl("get", "pod", "-n", namespace, name, "-o", "json"))
    return pod.get("status", {}).get("phase") == "Running"


def _event(run: NodeRun) -> None:
    """The next of: arrival, resize up, resize down, departure (cycled)."""
    kind = ("arrive", "up", "down", "depart")[run.events % 4]
    before = _tier(run.node)
    if kind == "arrive" or not run.alive:
        run.serial += 1
        name = f"b{run.serial}-{short(run.node)}"
        run.cpu_milli[name] = 200
        kubectl("apply", "-f", "-", stdin=_pod(run, name, 200))
        run.alive.append(name)
        _tier_moves(run, before)
        wait_for(f"{name} Running", lambda: _running(run, name), 300, 1)
    elif kind in ("up", "down"):
        name = run.alive[-1]
        cpu = run.cpu_milli[name] + (200 if kind == "up" else -100)
        run.cpu_milli[name] = cpu
        patch = {"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": f"{cpu}m", "memory": "16Mi"}, "limits": {"cpu": f"{2 * cpu}m", "memory": "64Mi"}}}]}}
        kubectl("patch", "pod", "-n", NS, name, "--subresource", "resize", "--type", "strategic", "-p", json.dumps(patch))
        _tier_moves(run, before)
    else:
        name = run.alive.pop(0)
        kubectl("delete", "pod", "-n", NS, name, "--wait=false")
        _tier_moves(run, before)
    run.events += 1


def _agent_values(run: NodeRun) -> dict[str, str | None]:
    """The files the agent owns on this node (its tier values), as the node holds them now."""
    diff = run.agent.diff()
    paths = [f"/sys/fs/cgroup/{c['path']}" for c in diff["cgroups"] if pod_uid(c["path"]) is None]
    return read_files(run.node, paths)


def _systemd_fault(run: NodeRun, what: str) -> None:
    before = _agent_values(run)
    if what == "daemon-reload":
        node_exec(run.node, "systemctl", "daemon-reload")
        run.reloads += 1
        time.sleep(2)  # systemd re-applies the units' properties as part of the reload; read after it
        after = read_files(run.node, before)
        run.reverted += sum(1 for p in before if after[p] != before[p])
    else:
        node_exec(run.node, "systemctl", "restart", "containerd")
        run.containerd_restarts += 1
        wait_for("containerd active again", lambda: node_exec(run.node, "systemctl", "is-active", "containerd").strip() == "active", 120)
        wait_for(f"the agent on {run.node} Ready", run.agent.ready, 120, 2)


def _kubelet_owned_writes(run: NodeRun) -> list[str]:
    """Pod and container paths among what the agent logged it changed during the run."""
    since = time.monotonic() - run.started + 5
    changed = [p for line in run.agent.lines(since) if line.get("event") == "reconcile" for p in line.get("changed", [])]
    return [p for p in changed if pod_uid(p) is not None]


def _failed_passes(run: NodeRun) -> list[str]:
    """The agent's passes that failed during the run (a write it could not make: the tier then moves
    only at the kubelet's next QoS pass), with their first error."""
    since = time.monotonic() - run.started + 5
    return [f"{line.get('scope')}: {(line.get('errors') or ['?'])[0]}" for line in run.agent.lines(since)
            if line.get("event") == "reconcile" and line.get("outcome") == "failed"]


def _resources(run: NodeRun) -> tuple[float, float]:
    """The agent's RSS (MiB) and CPU time (s) as the node counts them."""
    pids = run.agent.host_pids()
    text = node_exec(run.node, "sh", "-c", " ".join(f"cat /proc/{p}/stat; grep VmRSS /proc/{p}/status;" for p in pids))
    rss_kb = sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS"))
    # /proc/PID/stat after "(comm)": state is field 3, utime and stime fields 14 and 15
    ticks = sum(int(f[11]) + int(f[12]) for line in text.splitlines() if not line.startswith("VmRSS")
                for f in [line.rsplit(")", 1)[1].split()] if len(f) > 12)
    ticks_s = 100.0  # USER_HZ on Linux
    return rss_kb / 1024, ticks / ticks_s


def test_five_minutes_beside_the_kubelet_and_systemd() -> None:
    kubectl("create", "namespace", NS, ok=(0, 1))
    runs = {node: NodeRun(node, NodeAgent(node), NodeAgent(node).drift()) for node in NODES}
    usage0 = {node: (_resources(run), time.monotonic()) for node, run in runs.items()}
    faults = list(SYSTEMD_FAULTS)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < DURATION_S:
            for run in runs.values():
                _event(run)
            if faults and time.monotonic() - t0 >= faults[0][0] * DURATION_S:
                _systemd_fault(runs[V2_NODE], faults.pop(0)[1])
            time.sleep(5)
        for _, what in faults:  # a short run still does every systemd fault
            _systemd_fault(runs[V2_NODE], what)
        report: dict[str, Any] = {}
        disagreements: dict[str, tuple[Any, ...]] = {}
        owned_by: dict[str, list[str]] = {}
        failed_by: dict[str, list[str]] = {}
        for node, run in runs.items():
            diff = run.agent.diff()
            mine = {p["metadata"]["uid"] for p in json.loads(kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
                    if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")}
            result = compare(node, diff, mine)
            fights = run.agent.drift() - run.drift_before
            owned = owned_by[node] = _kubelet_owned_writes(run)
            failed = failed_by[node] = _failed_passes(run)
            (rss0, cpu0), w0 = usage0[node]
            rss, cpu = _resources(run)
            cpu_pct = 100 * (cpu - cpu0) / (time.monotonic() - w0)
            print(f"\ne2e-k8s beside {node}: {run.events} events ({run.reloads} daemon-reloads, "
                  f"{run.containerd_restarts} containerd restarts) in {time.monotonic() - t0:.0f} s: fights "
                  f"{fights:.0f}, drift {fights:.0f}, failed passes {len(failed)}, kubelet-owned writes {len(owned)}, values reverted after "
                  f"daemon-reload {run.reverted}; tier moved after each event in median "
                  f"{statistics.median(run.tier_s):.2f} s, max {max(run.tier_s):.2f} s; final diff "
                  f"{result.compared} values, {len(result.disagreements)} disagreements; agent RSS {rss:.0f} MiB "
                  f"(start {rss0:.0f}), CPU {cpu_pct:.2f} % of a core")
            report[node] = {"events": run.events, "fights": fights, "kubelet_owned_writes": len(owned), "failed_passes": len(failed),
                            "reverted_after_daemon_reload": run.reverted, "tier_move_s": run.tier_s,
                            "agent_rss_mib": rss, "agent_cpu_pct": cpu_pct, "daemon_reloads": run.reloads,
                            "containerd_restarts": run.containerd_restarts}
            disagreements[node] = result.disagreements
        if out := os.environ.get("KCG_E2E_K8S_OUT"):  # recorded before judged: a failed run's figures are shown too
            provenance.record(Path(out), "beside", lambda data: data.update(beside=report))
        for node, b in report.items():
            assert b["fights"] == 0, f"{node}: the agent found its values changed {b['fights']:.0f} times"
            assert not b["kubelet_owned_writes"], f"{node}: the agent wrote what the kubelet owns: {owned_by[node][:5]}"
            assert not b["failed_passes"], f"{node}: {b['failed_passes']} of the agent's passes failed: {failed_by[node][:3]}"
            assert b["reverted_after_daemon_reload"] == 0, f"{node}: {b['reverted_after_daemon_reload']} agent values reverted by daemon-reload"
            assert not disagreements[node], "\n".join(map(str, disagreements[node]))
        assert runs[V2_NODE].reloads >= 2 and runs[V2_NODE].containerd_restarts >= 1
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", ok=(0, 1))


QOS_PASS = "Updated QoS cgroup configuration"
QOS_NS = "qos-pass"  # the kubelet's V(4) line at the end of each QoS pass


def _guest_now() -> float:
    return float(node_exec(V2_NODE, "date", "+%s.%N"))


def _kubelet_qos_passes(since: float) -> list[float]:
    """The guest kubelet's QoS passes after `since` (guest clock), from its journal: cluster.sh runs it
    with --vmodule=qos_container_manager_linux=4, so each pass logs one line, and nothing else does."""
    text = node_exec(V2_NODE, "sh", "-c", f"journalctl -u kubelet --no-pager -o short-unix --since @{since:.3f} "
                     f"--grep '{QOS_PASS}' || true")  # rc 1: no line yet
    return [float(line.split()[0]) for line in text.splitlines() if QOS_PASS in line and line[:1].isdigit()]


def test_on_the_v2_node_the_tier_moves_long_before_the_kubelets_next_qos_pass() -> None:
    """A pods/resize on the systemd node, timed on the guest's clock: the agent's write of the Burstable
    slice's cpu.weight against the kubelet's own next QoS pass (its 60 s periodic one: a resize triggers
    none). Both values are the same (the beside run counts fights); this is when each lands."""
    # the kubelet also runs a QoS pass when it cleans up a pod: start once the five-minute run's are gone
    wait_for("the five-minute run's namespace gone", lambda: not kubectl("get", "namespace", NS, "--ignore-not-found", "-o", "name").strip(), 300, 2)
    kubectl("create", "namespace", QOS_NS, ok=(0, 1))
    agent = NodeAgent(V2_NODE)
    wait_for("the agent on the v2 node Ready", agent.ready, 300, 2)
    run = NodeRun(V2_NODE, agent, agent.drift())
    name = "qos-pass-v2"
    try:
        run.cpu_milli[name] = 200
        kubectl("apply", "-f", "-", stdin=_pod(run, name, 200).replace(f'"namespace": "{NS}"', f'"namespace": "{QOS_NS}"'))
        wait_for(f"{name} Running", lambda: _running(run, name, QOS_NS), 300, 1)
        rows = []
        for cpu in (400, 300):
            # right after one of the kubelet's passes, so that its next is a whole period away (its 60 s
            # timer runs whatever the pods do): the comparison does not depend on where in it the resize falls
            mark = _guest_now()
            wait_for("a QoS pass of the kubelet", lambda mark=mark: _kubelet_qos_passes(mark) or None, 90, 1)  # type: ignore[misc]
            before = _tier(V2_NODE)
            t0 = _guest_now()
            patch = {"spec": {"containers": [{"name": "app", "resources": {
                "requests": {"cpu": f"{cpu}m", "memory": "16Mi"}, "limits": {"cpu": f"{2 * cpu}m", "memory": "64Mi"}}}]}}
            kubectl("patch", "pod", "-n", QOS_NS, name, "--subresource", "resize", "--type", "strategic", "-p", json.dumps(patch))
            wait_for("the tier to move", lambda before=before: _tier(V2_NODE) != before, 120, 0.1)  # type: ignore[misc]
            agent_s = _guest_now() - t0  # an upper bound: includes one exec round trip into the guest
            after = _tier(V2_NODE)
            passes = wait_for("the kubelet's next QoS pass", lambda t0=t0: _kubelet_qos_passes(t0) or None, 90, 5)  # type: ignore[misc]
            kubelet_s = passes[0] - t0
            assert _tier(V2_NODE) == after, "the kubelet's pass left the agent's value as it was"
            rows.append({"cpu_milli": cpu, "agent_s": round(agent_s, 2), "kubelet_next_pass_s": round(kubelet_s, 2)})
            print(f"\ne2e-k8s v2 resize to {cpu}m: the agent moved the Burstable tier in {agent_s:.2f} s; "
                  f"the kubelet's next QoS pass came {kubelet_s:.1f} s after the resize")
            assert agent_s < kubelet_s, rows[-1]
        assert agent.drift() == run.drift_before, agent.counters("kube_cgroup_agent_drift_total")
        if out := os.environ.get("KCG_E2E_K8S_OUT"):
            provenance.record(Path(out), "v2 resize", lambda data: data.update(v2_resize_vs_qos_pass=rows))
    finally:
        kubectl("delete", "namespace", QOS_NS, "--wait=false", ok=(0, 1))
