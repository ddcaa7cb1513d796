"""How each measured cost grows, and what it comes to at 5,000 nodes (pure).

Least squares of a straight line over the measured points (per agent against the objects elsewhere; the
API server's side against the number of agents), and the extrapolation to Kubernetes' supported size
(sig-scalability: 5,000 nodes; 110 pods a node; the issue's 10,000 VPAs), beside a kubelet modelled from
its documented periods: its Lease renewed every 10 s (6 writes a minute), its node status posted every
5 minutes when nothing changed; each of those writes is one watch event for the controller-manager that
watches Leases and Nodes. The cluster's changes elsewhere are counted at their floor: VPA's recommender
rewrites every VPA's status once a minute (10,000 a minute), before any workload changes at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NODES = 5000
PODS_PER_NODE = 110
VPAS = 10_000
CLUSTER_PODS = 150_000  # sig-scalability: pods in a cluster, whatever its nodes (30 a node at 5,000 nodes)
RECOMMENDER_PERIOD_S = 60.0
KUBELET_LEASE_PER_MIN = 6.0
KUBELET_STATUS_PER_MIN = 1 / 5


@dataclass(frozen=True)
class Line:
    """y = intercept + slope * x, and how well it fits (r², 1.0 for a perfect or a one-point fit)."""

    intercept: float
    slope: float
    r2: float
    n: int

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def linear(xs: Sequence[float], ys: Sequence[float]) -> Line:
    """Ordinary least squares; one point is a line through the origin, none is zero."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    n = len(xs)
    if n == 0:
        return Line(0.0, 0.0, 1.0, 0)
    if n == 1 or len(set(xs)) == 1:
        mean_y = sum(ys) / n
        return Line(0.0, mean_y / xs[0] if xs[0] else 0.0, 1.0, n)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return Line(intercept, slope, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0, n)


@dataclass(frozen=True)
class Kubelets:
    """What the kubelets of `nodes` nodes cause, a second: their writes, and the watch events those
    writes make (one watcher each: the controller-manager's Lease and Node informers)."""

    writes_per_s: float
    watch_events_per_s: float

    @property
    def total(self) -> float:
        return self.writes_per_s + self.watch_events_per_s


def kubelets(nodes: int = NODES) -> Kubelets:
    writes = nodes * (KUBELET_LEASE_PER_MIN + KUBELET_STATUS_PER_MIN) / 60.0
    return Kubelets(writes, writes)


def cluster_changes_per_s(vpas: int = VPAS) -> float:
    """The floor of the changes elsewhere a second: every VPA's status rewritten once a minute."""
    return vpas / RECOMMENDER_PERIOD_S


@dataclass(frozen=True)
class Agents:
    """All agents of the cluster together, a second."""

    writes_per_s: float
    watch_events_per_s: float

    @property
    def total(self) -> float:
        return self.writes_per_s + self.watch_events_per_s


def agents(events_per_change: float, writes_per_min: float, nodes: int = NODES,
           changes_per_s: float | None = None, other_writes_per_s: float = 0.0, caused_events_per_s: float = 0.0) -> Agents:
    """`events_per_change`: the watch events one agent receives per change elsewhere (measured: ~1 when
    every agent watches every object, ~0 when the API server filters); `writes_per_min`: one agent's
    writes a minute on a quiet cluster; `other_writes_per_s`: the cluster-wide writes counted apart (the
    recommender's, scaled by recommender_at_scale); `caused_events_per_s`: the watch events those writes
    make (a VPA status patch reaches the nodes with that VPA's pods and the keeper)."""
    c = cluster_changes_per_s() if changes_per_s is None else changes_per_s
    return Agents(nodes * writes_per_min / 60.0 + other_writes_per_s, nodes * events_per_change * c + caused_events_per_s)


def status_watchers(nodes: int = NODES, vpas: int = VPAS, pods: int = CLUSTER_PODS) -> float:
    """The watchers a VPA's status change reaches: the nodes with its pods (one pod a node: pods / VPAs of
    them, at most every node), and the keeper."""
    return min(float(nodes), pods / vpas) + 1.0


def share_of_kubelets(a: Agents, k: Kubelets) -> float:
    return a.total / k.total if k.total else float("inf")


def objects_at_scale(base_objects: int, base_vpas: int, vpas: int = VPAS) -> int:
    """The objects elsewhere of a cluster with `vpas` VPAs, at the harness's mix (objects per VPA)."""
    return round(base_objects * vpas / base_vpas) if base_vpas else 0


# ---- the node recommender (agent/recommender/publish.py) ----

DEFAULT_RECOMMENDER_INTERVAL_S = 300.0  # agent/recommender/config.py: recommenderInterval's default


@dataclass(frozen=True)
class RecommenderMeasured:
    """The node recommender as a run measured it: bytes per object and per entry, requests per interval
    (at whatever interval the run had: each is counted per interval, so it holds at any interval)."""

    history_base_bytes: float  # one NodeHistory without any entry (metadata, managed fields, spec.node...)
    entry_bytes: float  # what one entry (a VPA naming the recommender with pods on the node) adds to it
    lease_bytes: float  # one Lease kcg-rec-<vpa>
    history_writes: float  # NodeHistory writes per node per interval (1: one PUT each)
    lease_writes: float  # Lease writes per held VPA per interval (a renewal every 3-4 intervals: 1/4-1/3)
    # VPA status patches per held VPA per interval (only when the status changed), of the VPAs whose pods have
    # days of history (the harness seeds 8): the steady state; a run that did not tell them apart: every VPA's
    status_writes: float
    lists: float  # the holder's LISTs of NodeHistories per held VPA per interval (1)
    # the same of a VPA whose pods had no history when their agent started: its first hours' transient, while
    # the confidence grows and the bounds move by more than statusMinChange at a merge; None: not told apart
    status_writes_young: float | None = None


@dataclass(frozen=True)
class RecommenderAtScale:
    """The node recommender's objects and requests in a cluster of `nodes`, every `interval_s`."""

    nodes: int
    vpas: float  # VPAs naming the recommender (each with its Lease and its holder)
    pods_per_node: float
    interval_s: float
    entries_per_node: float  # (VPA, node) pairs a node: a NodeHistory's entries
    history_bytes: float  # one node's NodeHistory
    histories_bytes: float  # all of them
    leases_bytes: float
    history_writes_per_s: float
    lease_writes_per_s: float
    status_writes_per_s: float
    lists_per_s: float
    nodes_per_vpa: float  # NodeHistories one LIST returns
    list_bytes_per_s: float  # what those LISTs return
    # the status patches were every VPA as young as the young ones measured (all in their first hour at once:
    # none counted in writes_per_s, the steady state); None: not measured
    status_writes_young_per_s: float | None = None

    @property
    def bytes(self) -> float:
        return self.histories_bytes + self.leases_bytes

    @property
    def writes_per_s(self) -> float:
        return self.history_writes_per_s + self.lease_writes_per_s + self.status_writes_per_s


def recommender_at_scale(m: RecommenderMeasured, nodes: int = NODES, vpas: int = VPAS,
                         pods_per_node: float = PODS_PER_NODE, interval_s: float = DEFAULT_RECOMMENDER_INTERVAL_S,
                         share: float = 1.0) -> RecommenderAtScale:
    """`share` of the pods and of the VPAs name the recommender; each VPA's pods spread over the nodes (a
    Deployment's replicas on different nodes), so a node's NodeHistory has an entry per pod of it under such
    a VPA (a (VPA, node) pair each), at most one per VPA:

        entries a node  e = min(share × pods_per_node, share × vpas)
        NodeHistories     nodes × (base + e × entry)            Leases  share × vpas × lease
        writes a second   nodes × history_writes / interval     (one PUT a node an interval)
                        + share × vpas × lease_writes / interval  (a renewal every 3-4 intervals)
                        + share × vpas × status_writes / interval (a holder's patch, when it changed: the
                                                                   steady state; status_writes_young beside it)
        the holders' LISTs  share × vpas × lists / interval, each returning nodes × e / (share × vpas)
                            NodeHistories (the nodes of one VPA)
    """
    named = share * vpas
    entries = min(share * pods_per_node, named)
    one = m.history_base_bytes + entries * m.entry_bytes
    per_vpa = nodes * entries / named if named else 0.0
    lists = named * m.lists / interval_s
    return RecommenderAtScale(
        nodes=nodes, vpas=named, pods_per_node=pods_per_node, interval_s=interval_s, entries_per_node=entries,
        history_bytes=one, histories_bytes=nodes * one, leases_bytes=named * m.lease_bytes,
        history_writes_per_s=nodes * m.history_writes / interval_s,
        lease_writes_per_s=named * m.lease_writes / interval_s,
        status_writes_per_s=named * m.status_writes / interval_s,
        lists_per_s=lists, nodes_per_vpa=per_vpa, list_bytes_per_s=lists * per_vpa * one,
        status_writes_young_per_s=None if m.status_writes_young is None else named * m.status_writes_young / interval_s)


def at_interval(per_min: float, measured_interval_s: float, interval_s: float = DEFAULT_RECOMMENDER_INTERVAL_S) -> float:
    """A rate of requests made once (or a few times) an interval, measured at one interval, at another."""
    return per_min * measured_interval_s / interval_s
