"""The agent's own upgrade on both nodes: `kubectl set image` on its DaemonSet to a second build of the image
(`kube-cgroup-agent:<version>-upgrade`, built from this checkout by deploy/image/build.sh with another name,
so another image, and loaded onto both nodes), while a StatefulSet rollout and VPA resizes are in flight
(tests/e2e_k8s/inflight.py). The DaemonSet's rolling update completes, every pod reaches its spec and its
VPA decision (no resize lost) and stays there (none reverted), the rollout keeps its budget and restarts no
app container, the agents count no fight, no kubelet-owned value is written, and the new agent on each node
says what it took up from the old one's state directory. The DaemonSet is set back to the shipped image
afterwards. The upgrade's time goes to figure 8.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import provenance
from tests.e2e_k8s.inflight import Drift, InFlight, Invariant, Reverts, in_flight, kubelet_owned_writes
from tests.e2e_k8s.nodes import (
    AGENT_NS,
    CLUSTER_SH,
    NODES,
    ROOT,
    NodeAgent,
    agent_ready,
    kubectl,
    needs_cluster,
    wait_for,
)

pytestmark = needs_cluster
NS = "upgrade"
ARCHIVE = ROOT / "dist" / "kube-cgroup-agent-image-upgrade.tar"


def _agent_image() -> str:
    return kubectl("get", "ds", "kube-cgroup-agent", "-n", AGENT_NS, "-o", "jsonpath={.spec.template.spec.containers[0].image}").strip()


def _set_agent_image(image: str) -> float:
    """The DaemonSet's rolling update to `image`: seconds until both nodes run a Ready agent from it."""
    t0 = time.monotonic()
    kubectl("set", "image", "daemonset/kube-cgroup-agent", "-n", AGENT_NS, f"agent={image}")
    _rolled_out(image)
    return time.monotonic() - t0


def _rolled_out(image: str) -> None:
    kubectl("rollout", "status", "daemonset/kube-cgroup-agent", "-n", AGENT_NS, "--timeout=600s", timeout=660)
    for node in NODES:
        wait_for(f"the agent on {node} Ready from {image}", lambda n=node: agent_ready(n) and  # type: ignore[misc]
                 NodeAgent(n).pod()["spec"]["containers"][0]["image"] == image, 300, 1)


@pytest.fixture(scope="module")
def second_image() -> Iterator[tuple[str, str]]:
    """(the shipped image, the second build's) with the second loaded on both nodes; the shipped one is set
    back afterwards."""
    shipped = _agent_image()
    second = shipped.rsplit(":", 1)[0] + ":" + shipped.rsplit(":", 1)[1] + "-upgrade"
    subprocess.run(["bash", "deploy/image/build.sh"], cwd=ROOT, check=True, capture_output=True, timeout=1200,
                   env={**os.environ, "OUT": str(ARCHIVE), "KCG_IMAGE_TAG": second})
    subprocess.run(["bash", str(CLUSTER_SH), "load-image", str(ARCHIVE)], check=True, capture_output=True, timeout=600)
    try:
        yield shipped, second
    finally:
        if _agent_image() != shipped:
            _set_agent_image(shipped)


@pytest.fixture(scope="module")
def flight() -> Iterator[InFlight]:
    yield from in_flight(NS)


def test_the_agents_upgrade_with_a_rollout_and_resizes_in_flight(second_image: tuple[str, str], flight: InFlight) -> None:
    shipped, second = second_image
    drift = Drift()
    old_pods = {n: NodeAgent(n).name for n in NODES}
    with flight.watch() as w, Reverts(flight) as reverts, Invariant() as invariant:
        t_start = time.monotonic()
        kubectl("set", "image", "daemonset/kube-cgroup-agent", "-n", AGENT_NS, f"agent={second}")
        time.sleep(3)  # the first node's agent is being replaced
        t_work = time.monotonic()
        flight.start()  # a rollout and a resize on both nodes, meeting the agents' rolling update
        _rolled_out(second)
        t_done = time.monotonic()
        upgrade_s = t_done - t_start
        converge_s = flight.wait(flight.converged, 600, "every pod at its spec and VPA decision")
        time.sleep(20)  # two resyncs of the new agents: nothing moves back
        assert flight.converged(), "a pod left its spec or its decision after converging"
    seen = w.seen
    in_flight = flight.in_flight_at(t_work, seen, reverts)  # begun while the old agents were being replaced
    after = flight.in_flight_at(t_done, seen, reverts)  # and still to do once the new ones were all Ready
    since = time.monotonic() - t_start + 5
    owned = [p for n in NODES for p in kubelet_owned_writes(NodeAgent(n), since)]
    drift.read(since)  # the new agents' whole lives
    resumed = {n: [e for e in NodeAgent(n).lines() if e.get("event") == "state.resumed"] for n in NODES}
    new_pods = {n: NodeAgent(n).name for n in NODES}
    print(f"\ne2e-k8s: agent upgrade {shipped} -> {second} on two nodes in {upgrade_s:.1f} s with "
          f"{in_flight[0]} pods of a rollout and {in_flight[1]} VPA resizes begun 3 s into it ({after[0]} and {after[1]} "
          f"still to do when it completed); converged {converge_s:.1f} s "
          f"after it; most unavailable at once {seen.max_unavailable}; restored {len(drift.restored)}, fights {len(drift.fought)}; reverted "
          f"{len(reverts.reverted)}; invariant samples {invariant.samples}, violations {len(invariant.violations)}; "
          f"state resumed {[(n, r[0].get('pod_records'), r[0].get('drift_records')) for n, r in resumed.items() if r]}")
    assert all(new_pods[n] != old_pods[n] for n in NODES)  # both agents replaced
    assert in_flight[0] > 0 and in_flight[1] > 0, in_flight  # the upgrade really met work in flight
    assert seen.max_unavailable == 1, seen.around_max()
    assert not seen.deleted
    assert {c for _, c in seen.restarted} == {"side"}, seen.restarted
    assert not reverts.reverted and reverts.samples > 0
    assert not invariant.violations and all(invariant.samples.values()), (invariant.violations[:5], invariant.samples)
    assert not drift.fought, drift.fought
    assert not owned, owned[:5]
    for node in NODES:  # the new agent read the old one's state directory (same hostPath)
        [line] = resumed[node]
        assert line["state_dir"] == "/var/lib/kube-cgroup-agent"
        assert line["pod_records"] > 0, line
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "agent_upgrade", lambda data: data.update(
            upgrade_s=upgrade_s, upgrade_converge_s=converge_s, upgrade_in_flight=list(in_flight),
            upgrade_in_flight_after=list(after)))
