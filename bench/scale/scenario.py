"""The harness's cluster (pure): each agent node's own 110 pods with their owner chains (Deployments ->
ReplicaSets -> pods with VPAs, a StatefulSet, the shared DaemonSet, bare pods, the agent's own pod), and
the "elsewhere" objects of a big cluster scaled down (namespaces, Deployments with ReplicaSet history,
VPAs opted in and not, StatefulSets, DaemonSets, LimitRanges, pods on nodes without an agent), none of them
on an agent's node."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from bench.scale.objects import (
    AGENT_NS,
    NODE_RECOMMENDER,
    OWN_BARE_PODS,
    OWN_DEPLOYMENT_PODS,
    OWN_DEPLOYMENTS,
    OWN_RESOURCES,
    OWN_STS_PODS,
    PODS_PER_NODE,
    containers_of,
    daemonset,
    deployment,
    limitrange,
    namespace,
    owner,
    pod,
    replicaset,
    short_hash,
    statefulset,
    template,
    vpa,
)


@dataclass(frozen=True)
class Base:
    """The "elsewhere" objects at scale factor ×1 (×16 is the issue's 4,000 ReplicaSets...)."""

    namespaces: int = 20
    deployments: int = 34
    replicasets: int = 250
    vpas: int = 60
    statefulsets: int = 20
    daemonsets: int = 6
    limitranges: int = 20
    pods_per_deployment: int = 2  # bound to nodes without an agent

    def times(self, factor: int) -> Base:
        return replace(self, **{f: getattr(self, f) * factor for f in self.__dataclass_fields__ if f != "pods_per_deployment"})


# ---- the "elsewhere" cluster ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Elsewhere:
    """Every object of the big cluster at one scale factor, in creation order (namespaces first)."""

    namespaces: list[dict[str, Any]]
    objects: list[dict[str, Any]]  # workloads, ReplicaSets, VPAs, LimitRanges
    pods: list[dict[str, Any]]  # bound to nodes without an agent

    def count(self, kind: str) -> int:
        return sum(1 for o in self.objects if o["kind"] == kind)


def elsewhere_ns(k: int) -> str:
    return f"app-{k:04d}"


def elsewhere(base: Base, factor: int, nodes: list[str]) -> Elsewhere:
    """The objects of scale factor `factor`: `factor` blocks of the ×1 cluster, each in namespaces of its
    own, so a factor holds every object of each smaller one (loading ×4 after ×1 adds only the rest)."""
    out = Elsewhere([], [], [])
    for block in range(factor):
        one = _block(base, block, nodes)
        out.namespaces.extend(one.namespaces)
        out.objects.extend(one.objects)
        out.pods.extend(one.pods)
    return out


def _block(b: Base, block: int, nodes: list[str]) -> Elsewhere:
    nss = [elsewhere_ns(block * b.namespaces + k) for k in range(b.namespaces)]
    objects: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    rs_left = b.replicasets
    targets: list[tuple[str, str, str]] = []  # (kind, namespace, name) a VPA may point at
    for d in range(b.deployments):
        g = block * b.deployments + d
        ns, name = nss[d % len(nss)], f"web-{g:05d}"
        history = rs_left // (b.deployments - d)  # the ReplicaSets spread evenly, the sum exact
        rs_left -= history
        objects.append(deployment(name, ns, g, "elsewhere", 2, history))
        for rev in range(1, history + 1):
            objects.append(replicaset(name, ns, g, "elsewhere", rev, 2 if rev == history else 0))
        rs = objects[-1]
        for r in range(b.pods_per_deployment):
            pname = f"{rs['metadata']['name']}-{short_hash(name, r)[:5]}"
            pods.append(pod(pname, ns, nodes[(g * b.pods_per_deployment + r) % len(nodes)],
                            rs["spec"]["template"], "elsewhere", owner("ReplicaSet", rs["metadata"]["name"]),
                            {"pod-template-hash": rs["metadata"]["labels"]["pod-template-hash"]}))
        targets.append(("Deployment", ns, name))
    for s in range(b.statefulsets):
        g = block * b.statefulsets + s
        ns, name = nss[(s * 7) % len(nss)], f"db-{g:05d}"
        objects.append(statefulset(name, ns, g, "elsewhere", 3, s % 2 == 0))
        targets.append(("StatefulSet", ns, name))
    for s in range(b.daemonsets):
        g = block * b.daemonsets + s
        ns, name = nss[(s * 3) % len(nss)], f"agent-{g:05d}"
        objects.append(daemonset(name, ns, g, "elsewhere", s % 2 == 0))
        targets.append(("DaemonSet", ns, name))
    for v in range(b.vpas):
        kind, ns, name = targets[v % len(targets)]
        vname = name if v < len(targets) else f"{name}-{v}"
        objects.append(vpa(vname, ns, kind, name, "elsewhere", v % 3 != 2))
    for k in range(b.limitranges):
        objects.append(limitrange(nss[k % len(nss)], "elsewhere"))
    return Elsewhere([namespace(n, "elsewhere") for n in nss], objects, pods)


def elsewhere_nodes(base: Base, factor: int) -> list[str]:
    """Nodes without an agent for the elsewhere pods, 110 pods a node at most."""
    b = base.times(factor)
    n = -(-(b.deployments * base.pods_per_deployment) // PODS_PER_NODE)
    return [f"elsewhere-{j:04d}" for j in range(max(1, n))]


# ---- an agent node's own pods ------------------------------------------------------------------------


# The agent node's VPAs that name the node recommender (spec.recommenders: kube-cgroup-agent): three of its
# six, 54 of its 110 pods — two opted in to the actuator, one not; the others are served by VPA's own
# recommender (the harness writes their status as it would).
OWN_RECOMMENDED = ("svc-2", "svc-3", "svc-4")
# Of those, the VPAs whose pods' histories the harness seeds before the agents start, as if the node had
# sampled them for 8 days (nodes.seed_recommender): the steady state of a cluster whose agents have run for
# days. The third (svc-4) starts with no history, as every VPA in a fresh cluster: its first hour's transient.
OWN_SEEDED = ("svc-2", "svc-3")


@dataclass(frozen=True)
class Own:
    """One agent node's namespace, workloads, VPAs and 110 pods (with owner chains)."""

    node: str
    namespace: str
    objects: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    # (VPA name, its containers): opted in and served by VPA's recommender (the harness writes their
    # status): the latency probes'
    vpas: list[tuple[str, tuple[str, ...]]]
    # (VPA name, its containers, its pods on the node): those naming the node recommender
    recommended: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)

    @property
    def recommended_pods(self) -> int:
        return sum(n for _, _, n in self.recommended)

    @property
    def recommended_containers(self) -> int:
        return sum(len(cs) * n for _, cs, n in self.recommended)

    @property
    def seeded(self) -> list[str]:
        """The VPAs naming the node recommender whose pods' histories are seeded (OWN_SEEDED)."""
        return [name for name, _, _ in self.recommended if name in OWN_SEEDED]

    @property
    def young(self) -> list[str]:
        """The VPAs naming the node recommender whose pods have no history when the agent starts."""
        return [name for name, _, _ in self.recommended if name not in OWN_SEEDED]

    def vpa_objects(self, names: list[str]) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == "VerticalPodAutoscaler" and o["metadata"]["name"] in names]


def own_ns(node_name: str) -> str:
    return f"own-{node_name}"


SHARED_NS = "own-shared"
SHARED_DS = "node-monitor"


def shared_daemonset() -> dict[str, Any]:
    return daemonset(SHARED_DS, SHARED_NS, 1, "own", True)


def own(node_name: str, index: int) -> Own:
    ns = own_ns(node_name)
    objects: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    vpas: list[tuple[str, tuple[str, ...]]] = []
    recommended: list[tuple[str, tuple[str, ...], int]] = []
    for d in range(OWN_DEPLOYMENTS):
        name = f"svc-{d}"
        i = index * 10 + d
        objects.append(deployment(name, ns, i, "own", OWN_DEPLOYMENT_PODS, 3, OWN_RESOURCES))
        for rev in (1, 2, 3):
            objects.append(replicaset(name, ns, i, "own", rev, OWN_DEPLOYMENT_PODS if rev == 3 else 0, OWN_RESOURCES))
        rs = objects[-1]
        h = rs["metadata"]["labels"]["pod-template-hash"]
        for r in range(OWN_DEPLOYMENT_PODS):
            pods.append(pod(f"{rs['metadata']['name']}-{short_hash(node_name, d, r)[:5]}", ns, node_name,
                            rs["spec"]["template"], "own", owner("ReplicaSet", rs["metadata"]["name"]), {"pod-template-hash": h}))
        opted = d < OWN_DEPLOYMENTS - 1
        ours = name in OWN_RECOMMENDED
        objects.append(vpa(name, ns, "Deployment", name, "own", opted, NODE_RECOMMENDER if ours else None))
        if ours:
            recommended.append((name, containers_of(rs["spec"]["template"]), OWN_DEPLOYMENT_PODS))
        elif opted:
            vpas.append((name, containers_of(rs["spec"]["template"])))
    sts = statefulset("store", ns, index * 10 + 7, "own", OWN_STS_PODS, True, OWN_RESOURCES)
    sts["status"] = {"updateRevision": f"store-{short_hash('store', ns)}", "currentRevision": f"store-{short_hash('store', ns)}"}
    objects.append(sts)
    objects.append(vpa("store", ns, "StatefulSet", "store", "own", True))
    vpas.append(("store", containers_of(sts["spec"]["template"])))
    rev = sts["status"]["updateRevision"]
    for r in range(OWN_STS_PODS):
        pods.append(pod(f"store-{r}", ns, node_name, sts["spec"]["template"], "own", owner("StatefulSet", "store"),
                        {"controller-revision-hash": rev, "apps.kubernetes.io/pod-index": str(r),
                         "statefulset.kubernetes.io/pod-name": f"store-{r}"}))
    ds = shared_daemonset()
    pods.append(pod(f"{SHARED_DS}-{short_hash(node_name)[:5]}", SHARED_NS, node_name, ds["spec"]["template"], "own",
                    owner("DaemonSet", SHARED_DS), {"controller-revision-hash": short_hash(SHARED_DS), "pod-template-generation": "1"}))
    for b in range(OWN_BARE_PODS):
        pods.append(pod(f"job-{b}", ns, node_name, template(f"job-{b}", index * 10 + b), "own"))
    objects.append(limitrange(ns, "own"))
    pods.append(agent_pod(node_name))
    return Own(node_name, ns, objects, pods, vpas, recommended)


def agent_pod(node_name: str) -> dict[str, Any]:
    """The agent's own pod on its node, as its DaemonSet would make it: its token is bound to it."""
    tmpl = template("kube-cgroup-agent", 0, 0, {"requests": {"cpu": "50m", "memory": "192Mi"},
                                                 "limits": {"cpu": "500m", "memory": "384Mi"}})
    tmpl["spec"]["serviceAccountName"] = "kube-cgroup-agent"
    tmpl["metadata"]["labels"] = {"app.kubernetes.io/name": "kube-cgroup-agent"}
    return pod(f"kube-cgroup-agent-{short_hash('agent', node_name)[:5]}", AGENT_NS, node_name, tmpl, "own",
               owner("DaemonSet", "kube-cgroup-agent"))


def iter_kinds(objs: list[dict[str, Any]], *kinds: str) -> Iterator[dict[str, Any]]:
    return (o for o in objs if o["kind"] in kinds)
