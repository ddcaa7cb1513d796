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
           changes_per_s: float | None = None) -> Agents:
    """`events_per_change`: the watch events one agent receives per change elsewhere (measured: ~1 when
    every agent watches every object, ~0 when the API server filters); `writes_per_min`: one agent's
    requests a minute on a quiet cluster."""
    c = cluster_changes_per_s() if changes_per_s is None else changes_per_s
    return Agents(nodes * writes_per_min / 60.0, nodes * events_per_change * c)


def share_of_kubelets(a: Agents, k: Kubelets) -> float:
    return a.total / k.total if k.total else float("inf")


def objects_at_scale(base_objects: int, base_vpas: int, vpas: int = VPAS) -> int:
    """The objects elsewhere of a cluster with `vpas` VPAs, at the harness's mix (objects per VPA)."""
    return round(base_objects * vpas / base_vpas) if base_vpas else 0
