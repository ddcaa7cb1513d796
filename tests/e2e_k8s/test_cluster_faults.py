"""Cluster faults with a rollout and VPA resizes in flight on both nodes (tests/e2e_k8s/inflight.py), the agent
as its DaemonSet: each node's kubelet restarted, each node's containerd restarted, the API server stopped
for 30 s, an agent pod force-deleted, the guest node rebooted (its agent pod returns and goes on from its
state directory on the host path). One fault per test, in that order; after each, every pod converges to
its spec and its VPA decision, no child cgroup was above its parent in any sample taken on the nodes during
the fault, no resize was lost or reverted, the agents counted no fight, and nothing the kubelet owns was
written. Each fault's row goes to RELIABILITY.md ("Cluster faults", from bench/results/e2e_k8s.json).

A reboot restarts every container of the node (the kubelet starts the pods again), and a reboot or an API
server away long enough for the node lifecycle controller to mark every pod of a node not Ready makes
pods unavailable whatever the rollout's budget: there only the pods the agents took out themselves (their
readiness gate False) are held to it, and app restarts are allowed for the reboot alone.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import provenance
from tests.e2e_k8s.inflight import Drift, InFlight, Invariant, Reverts, in_flight, kubelet_owned_writes
from tests.e2e_k8s.nodes import (
    AGENT_NS,
    CLUSTER_SH,
    NODES,
    V1_NODE,
    V2_NODE,
    NodeAgent,
    agent_ready,
    kubectl,
    needs_cluster,
    wait_for,
)

pytestmark = needs_cluster
NS = "faults"
API_DOWN_S = 30.0


def _cluster(*args: str, timeout: float = 900) -> None:
    done = subprocess.run(["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"cluster.sh {' '.join(args)}: rc {done.returncode}: {done.stderr.strip()[-1500:]}")


def _node_ready(node: str) -> bool:
    try:
        return "True" in kubectl("get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", timeout=10)
    except Exception:
        return False


def _back(node: str) -> None:
    """The node Ready and its agent Ready again."""
    wait_for(f"{node} Ready", lambda: _node_ready(node), 600, 1)
    wait_for(f"the agent on {node} Ready", lambda: agent_ready(node), 600, 1)


def _restart(node: str, component: str) -> Callable[[], None]:
    def inject() -> None:
        _cluster("restart", node, component)
        _back(node)
    return inject


def _api_server_away() -> None:
    _cluster("apiserver", "stop")
    time.sleep(API_DOWN_S)
    _cluster("apiserver", "start")
    for node in NODES:
        _back(node)


def _force_delete_agent(node: str) -> Callable[[], None]:
    def inject() -> None:
        old = NodeAgent(node).name
        kubectl("delete", "pod", old, "-n", AGENT_NS, "--force", "--grace-period=0")
        wait_for(f"a new agent pod on {node}", lambda: _new_agent(node, old), 300, 1)
        _back(node)
    return inject


def _new_agent(node: str, old: str) -> bool:
    try:
        return NodeAgent(node).name != old
    except AssertionError:
        return False


def _reboot_guest() -> None:
    _cluster("reboot", V2_NODE)
    _back(V2_NODE)


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[], None]
    reboot: bool = False  # the node's containers all restart; its pods are away for a while
    # the cluster itself takes pods out: the node lifecycle controller marks every pod of a node whose
    # heartbeats stopped (its API server away) not Ready
    node_wide: bool = False

    def __str__(self) -> str:
        return self.name


FAULTS = (
    Fault(f"kubelet restarted on {V1_NODE}", _restart(V1_NODE, "kubelet")),
    Fault(f"kubelet restarted on {V2_NODE}", _restart(V2_NODE, "kubelet")),
    Fault(f"containerd restarted on {V1_NODE}", _restart(V1_NODE, "containerd")),
    Fault(f"containerd restarted on {V2_NODE}", _restart(V2_NODE, "containerd")),
    Fault(f"API server stopped for {API_DOWN_S:.0f} s", _api_server_away, node_wide=True),
    Fault(f"agent pod force-deleted on {V1_NODE}", _force_delete_agent(V1_NODE)),
    Fault(f"agent pod force-deleted on {V2_NODE}", _force_delete_agent(V2_NODE)),
    Fault(f"{V2_NODE} rebooted", _reboot_guest, reboot=True, node_wide=True),
)


@pytest.fixture(scope="module")
def flight() -> Iterator[InFlight]:
    yield from in_flight(NS)


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_a_cluster_fault_mid_resize_and_mid_rollout_loses_nothing(flight: InFlight, fault: Fault) -> None:
    flight.wait(flight.converged, 600, "the previous round converged")
    t_start = time.monotonic()
    owned: list[str] = []
    drift = Drift()
    with flight.watch() as w, Reverts(flight) as reverts, Invariant() as invariant:
        if "agent pod" in fault.name or fault.reboot:  # that agent's log goes with it: read it first
            owned += [p for n in NODES for p in kubelet_owned_writes(NodeAgent(n), time.monotonic() - t_start + 5)]
            drift.read(time.monotonic() - t_start + 5)
        flight.start()
        t_inject = time.monotonic()  # at once: the agents act within a second
        fault.inject()
        back_s = time.monotonic() - t_inject
        converge_s = flight.wait(flight.converged, 900, "every pod at its spec and VPA decision")
        time.sleep(15)  # past a resync of every agent: nothing moves back
        still = flight.converged()
    seen = w.seen
    in_flight = flight.in_flight_at(t_inject, seen, reverts)
    owned += [p for n in NODES for p in kubelet_owned_writes(NodeAgent(n), time.monotonic() - t_inject + 5)]
    drift.read(time.monotonic() - t_inject + 5)
    lost = 0 if still else 1
    print(f"\ne2e-k8s: {fault}: injected {t_inject - t_start:.1f} s after the watches began, at once after a rollout and a resize, "
          f"{in_flight[0]} rollout pods and {in_flight[1]} resizes in flight; back after {back_s:.1f} s, converged "
          f"{converge_s:.1f} s later; most unavailable at once {seen.max_unavailable} (taken out by the agents "
          f"{seen.max_updating}); reverted {len(reverts.reverted)}; "
          f"restored once {sorted(set(drift.restored))}; fights {len(drift.fought)}; kubelet-owned writes {len(owned)}; invariant samples {invariant.samples}, "
          f"violations {len(invariant.violations)}; watch reopened {seen.errors} times")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        row = {"injected_after_s": t_inject - t_start, "rollout_in_flight": in_flight[0], "resizes_in_flight": in_flight[1],
               "back_s": back_s, "converge_s": converge_s, "lost": lost, "reverted": len(reverts.reverted),
               "restored": len(drift.restored), "fights": len(drift.fought), "kubelet_owned_writes": len(owned), "invariant_samples": sum(invariant.samples.values()),
               "invariant_violations": len(invariant.violations), "max_unavailable": seen.max_unavailable,
               "max_updating": seen.max_updating}
        provenance.record(Path(out), "cluster_faults", lambda data: data.setdefault("cluster_faults", {}).update({fault.name: row}))
    assert still, "a pod left its spec or its decision after converging"
    assert sum(in_flight) > 0, in_flight  # the fault met work in flight
    assert not reverts.reverted, reverts.reverted
    assert not invariant.violations and all(invariant.samples.values()), (invariant.violations[:5], invariant.samples)
    assert not drift.fought, drift.fought
    assert not owned, owned[:5]
    assert not seen.deleted, seen.deleted  # the rollout is in place: no pod deleted, whatever the fault
    assert seen.max_updating <= 1, seen.timeline[-30:]  # the agents took one pod out at a time, whatever the fault
    if not fault.node_wide:
        assert seen.max_unavailable <= 1, seen.around_max()
    if not fault.reboot:
        assert {c for _, c in seen.restarted} <= {"side"}, seen.restarted
