"""The harness's world and its life: the control plane, the agent install, the simulated nodes with their
own pods, the byte-counting proxy, the keeper, the agents, the simulated kubelets, the reference watcher;
snapshots of what is measured; and the teardown of everything it started (by PID), leaving nothing."""

from __future__ import annotations

import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.scale import metrics, usage
from bench.scale.agents import Process, start_agent, start_keeper, wait_ready
from bench.scale.api import MERGE, Client, Credentials, in_parallel
from bench.scale.audit import (
    READS,
    AuditTail,
    patches_by_age,
    split_recommender,
    tally,
    tally_recommender,
    tally_status,
)
from bench.scale.churn import Churn, Cluster, Counts, now_iso
from bench.scale.cluster import Loader, install
from bench.scale.controlplane import HOME, ControlPlane, taken
from bench.scale.kubelets import Kubelets
from bench.scale.nodes import (
    RECOMMENDER_INTERVAL_S,
    SEED_COUNT_STEP_S,
    SEED_DAYS,
    SEED_STEP_S,
    Seeded,
    SimNode,
    converge_tree,
    named_pods,
    seed_recommender,
    token,
    write_files,
    write_kubeconfig,
)
from bench.scale.objects import AGENT_NS, PODS_PER_NODE, namespace, node, own_recommendation
from bench.scale.proxy import Proxy
from bench.scale.reference import ReferenceWatcher
from bench.scale.scenario import SHARED_NS, Base, elsewhere_nodes, own, shared_daemonset

PROXY_BASE = 6600  # agent i: 6600 + i; the keeper 6598, the reference watcher 6599
AGENT_PORT_BASE = 9900  # agent i: metrics 9900 + 2i, health 9901 + 2i; the keeper 9896/9897


def say(msg: str) -> None:
    print(f"scale: {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


@dataclass
class Snapshot:
    at: float  # time.time()
    usage: dict[str, metrics.Usage]  # agent (and keeper) -> RSS, CPU
    bytes: dict[str, tuple[int, int]]  # proxy name -> (to the API server, from it)
    api: metrics.Samples
    changes: int
    pods: int
    events: dict[str, dict[str, int]] = field(default_factory=dict)  # proxy name -> {"MODIFIED Pod": n}


@dataclass
class Harness:
    max_agents: int
    base: Base
    max_factor: int
    code: Path
    cp: ControlPlane = field(default_factory=ControlPlane)
    sims: list[SimNode] = field(default_factory=list)
    agents: dict[str, Process] = field(default_factory=dict)
    keeper: Process | None = None
    proxy: Proxy | None = None
    audit: AuditTail | None = None
    kubelets: Kubelets | None = None
    reference: ReferenceWatcher | None = None
    owns: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    recommender_interval_s: float = RECOMMENDER_INTERVAL_S

    def __post_init__(self) -> None:
        self.counts = Counts()
        self.started: dict[str, float] = {}  # agent -> when it was first ready
        self.usage = usage.Updater()  # the containers' CPU counters of the nodes whose agent runs
        self.counters: dict[str, list[usage.Counter]] = {}
        self.seeded: dict[str, Seeded] = {}  # agent node -> the recommender state written before its agent started

    def steady(self, after_s: float = 60.0) -> dict[str, Any]:
        """Each agent's reads a minute from `after_s` past its start to now (its watches' reconnects
        included, whatever happened around it), and its writes apart from those a VPA change made it send;
        the recommender's requests apart (audit.recommender_part), with the VPAs the node holds (each of its
        VPAs naming the recommender has its pods on this node only: it holds them all). The holder's VPA
        status patches also by VPA, and summed for the VPAs whose pods' histories were seeded ("aged": the
        steady state) and for the others ("young": no history when the agent started, the transient)."""
        assert self.audit is not None
        now = time.time()
        out: dict[str, Any] = {}
        for name, t0 in sorted(self.started.items()):
            if name == "keeper" or now - t0 - after_s < 60:
                continue
            rec, recs = split_recommender(self.audit.records(t0 + after_s, now, f"agent:{name}"))
            reads = [r for r in recs if r.verb in READS]
            own = [r for r in recs if r.verb not in READS
                   and r.resource not in ("pods/resize", "pods", "pods/status", "events")]
            minutes = (now - t0 - after_s) / 60
            out[name] = {"window_s": round(minutes * 60), "from_s": after_s, "reads_per_min": round(len(reads) / minutes, 2),
                         "other_writes_per_min": round(len(own) / minutes, 2), "reads": tally(reads),
                         "recommender_per_min": round(len(rec) / minutes, 2), "recommender": tally_recommender(rec),
                         "held_vpas": len(self.owns[name].recommended) if name in self.owns else 0}
            if name in self.owns:
                out[name].update(self.status_patches(name, tally_status(rec)))
        return out

    def status_patches(self, node: str, by_vpa: dict[str, int]) -> dict[str, Any]:
        """The holder's status patches of a node's VPAs ("namespace/name" -> count), summed for its aged VPAs
        (their pods' histories seeded) and its young ones."""
        o = self.owns[node]
        aged = {f"{o.namespace}/{n}" for n in o.seeded} if node in self.seeded else set()
        held = {f"{o.namespace}/{n}" for n, _, _ in o.recommended}
        return {"status_patches_by_vpa": by_vpa, "status_patches": patches_by_age(by_vpa, held, aged)}

    def recommender_info(self) -> dict[str, Any]:
        """What the recommender ran with and over, for goals.py: the harness's interval and the default, the
        VPAs naming it on each agent node, their pods and containers, the usage thread's cost."""
        from agent.recommender.config import RecommenderSettings

        one = next(iter(self.owns.values()), None)
        return {
            "interval_s": self.recommender_interval_s,
            "default_interval_s": RecommenderSettings().recommender_interval_s,
            "pods_per_node": PODS_PER_NODE,
            "vpas_per_node": len(one.recommended) if one else 0,
            "vpas_on_node": sum(1 for o in one.objects if o["kind"] == "VerticalPodAutoscaler") if one else 0,
            "named_pods_per_node": one.recommended_pods if one else 0,
            "named_containers_per_node": sorted(o.recommended_containers for o in self.owns.values()),
            "seeded": {"vpas_per_node": len(one.seeded) if one else 0, "young_vpas_per_node": len(one.young) if one else 0,
                       "vpas": list(one.seeded) if one else [], "days": SEED_DAYS, "sample_step_s": SEED_STEP_S,
                       "count_step_s": SEED_COUNT_STEP_S, "nodes": len(self.seeded),
                       "containers_per_node": sorted(x.containers for x in self.seeded.values()),
                       "bytes_per_node": sorted(x.bytes for x in self.seeded.values()),
                       "seconds": round(self.timings.get("recommender_seed_s", 0.0), 2)},
            "usage": {"containers": len(self.usage), "passes": self.usage.passes,
                      "cpu_s": round(self.usage.cpu_s, 1), "errors": self.usage.errors},
        }

    # ---- setup ----

    def ports(self) -> list[int]:
        api = [self.cp.ports.api, self.cp.ports.etcd, self.cp.ports.etcd_peer]
        proxies = [PROXY_BASE - 2, PROXY_BASE - 1, *(PROXY_BASE + i for i in range(self.max_agents))]
        own = [AGENT_PORT_BASE - 4, AGENT_PORT_BASE - 3, *(AGENT_PORT_BASE + j for j in range(2 * self.max_agents))]
        return api + proxies + own

    def setup(self) -> None:
        busy = taken(self.ports())
        if busy:
            raise RuntimeError(f"ports {busy} are taken: another cluster or an earlier run is up (stop it first)")
        t0 = time.monotonic()
        say("control plane (etcd, kube-apiserver) ...")
        self.cp.start()
        self.client: Client = self.cp.client()
        self.shipped = install(self.client, self.code)
        self.audit = AuditTail(self.cp.audit_log)
        self.timings["control_plane_s"] = time.monotonic() - t0
        self.loader = Loader(self.client)
        self.cluster = Cluster(self.client, self.loader, self.counts)
        self.sims = [SimNode(f"sim-{i:03d}", i, HOME / "nodes" / f"sim-{i:03d}", PROXY_BASE + i,
                             AGENT_PORT_BASE + 2 * i, AGENT_PORT_BASE + 2 * i + 1) for i in range(self.max_agents)]
        self.other_nodes = elsewhere_nodes(self.base, self.max_factor)
        say(f"{len(self.sims)} agent nodes with 110 pods each, {len(self.other_nodes)} nodes without an agent ...")
        t1 = time.monotonic()
        node_objs = in_parallel(self.client.create, [node(s.name, True) for s in self.sims]
                                + [node(n, False) for n in self.other_nodes])
        self.node_objs = {n["metadata"]["name"]: n for n in node_objs}
        self.loader.objects([namespace(SHARED_NS, "own"), shared_daemonset()])
        started = now_iso()
        for s in self.sims:
            o = own(s.name, s.index)
            self.owns[s.name] = o
            self.loader.objects([namespace(o.namespace, "own"), *o.objects])
            for name, containers in o.vpas:  # the upstream recommender's, at the pods' requests (not the
                # VPAs naming the node recommender: their holder writes theirs)
                self.client.call("PATCH", f"/apis/autoscaling.k8s.io/v1/namespaces/{o.namespace}/verticalpodautoscalers/{name}/status",
                                 own_recommendation(containers, 200), MERGE)
            pods = self.loader.pods(o.pods, started, first_ip=s.index * 256)
            write_files(s, self.shipped, self.recommender_interval_s)
            self.counters[s.name] = converge_tree(s, self.node_objs[s.name], pods)
            self.seed(s, o.vpa_objects(o.seeded), pods)
            agent_pod = next(p for p in pods if p["metadata"]["namespace"] == AGENT_NS)
            write_kubeconfig(s.kubeconfig, s.proxy_port, self.cp.pki / "ca.crt",
                             token(self.client, "kube-cgroup-agent", agent_pod))
        self.timings["nodes_s"] = time.monotonic() - t1
        if self.seeded:
            one = next(iter(self.seeded.values()))
            say(f"recommender state seeded on {len(self.seeded)} nodes ({one.containers} containers each, {SEED_DAYS:g} days) "
                f"in {self.timings['recommender_seed_s']:.1f} s")
        names = {"keeper": PROXY_BASE - 2, "reference": PROXY_BASE - 1, **{s.name: s.proxy_port for s in self.sims}}
        self.proxy = Proxy(self.cp.ports.api, self.cp.pki, names, {"reference"}, self.cp.state / "logs" / "proxy.log")
        self.kubelets = Kubelets(self.client, [s.name for s in self.sims] + self.other_nodes, self.audit)
        self.kubelets.start()
        creds = self.cp.credentials()
        self.reference = ReferenceWatcher(self.client, Credentials(creds.host, PROXY_BASE - 1, creds.ca, creds.cert, creds.key))
        self.reference.start()
        keeper_dir = HOME / "keeper"
        keeper_dir.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(keeper_dir / "kubeconfig", PROXY_BASE - 2, self.cp.pki / "ca.crt",
                         token(self.client, "kube-cgroup-agent-vpa-admission", None))
        self.keeper = start_keeper(keeper_dir, keeper_dir / "kubeconfig", AGENT_PORT_BASE - 4, AGENT_PORT_BASE - 3)

    def seed(self, node: SimNode, vpas: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        """The node's recommender state as its sampler would have left it after SEED_DAYS of sampling the
        containers of the pods `vpas` select (nodes.seed_recommender), ending now; before its agent starts."""
        if not vpas:
            return
        t0 = time.monotonic()
        keys = named_pods(vpas, pods)
        counters = [c for c in self.counters[node.name] if c.pod in keys]
        self.seeded[node.name] = seed_recommender(node, counters, time.time(), random.Random(f"seed/{node.name}"))
        self.timings["recommender_seed_s"] = self.timings.get("recommender_seed_s", 0.0) + time.monotonic() - t0

    def start_agents(self, n: int) -> dict[str, float]:
        """Agents on the first n nodes (those not running yet); seconds until each was ready."""
        new = [start_agent(s) for s in self.sims[:n] if s.name not in self.agents]
        for p in new:
            self.agents[p.name] = p
            self.usage.add(self.counters.get(p.name, []))
        if new and not self.usage.is_alive():
            self.usage.start()
        waiting = [*new] + ([self.keeper] if self.keeper is not None and "keeper_ready_s" not in self.timings else [])
        took = wait_ready(waiting, 600.0)
        for name in took:
            self.started.setdefault(name, time.time())
        if "keeper" in took:
            self.timings["keeper_ready_s"] = took.pop("keeper")
        return took

    # ---- measuring ----

    def snapshot(self) -> Snapshot:
        assert self.proxy is not None
        usage = {n: u for n, p in self.agents.items() if (u := p.usage()) is not None}
        if self.keeper is not None and (k := self.keeper.usage()) is not None:
            usage["keeper"] = k
        counted = self.proxy.snapshot()
        return Snapshot(time.time(), usage, {n: (v["up"], v["down"]) for n, v in counted.items()},
                        metrics.parse(self.client.text("/metrics")), self.counts.changes, self.counts.pods,
                        {n: v["events"] for n, v in counted.items()})

    def settle(self, timeout_s: float, busy_share: float = 0.03, window_s: float = 5.0) -> float | None:
        """Wait until every agent uses less than `busy_share` of a core over `window_s`; the seconds it took,
        or None when some agent was still busy at the timeout."""
        t0 = time.monotonic()
        before = {n: p.usage() for n, p in self.agents.items()}
        while time.monotonic() - t0 < timeout_s:
            time.sleep(window_s)
            after = {n: p.usage() for n, p in self.agents.items()}
            busy = [n for n in after if (a := after[n]) and (b := before.get(n)) and (a.cpu_s - b.cpu_s) / window_s > busy_share]
            if not busy:
                return time.monotonic() - t0
            before = after
        return None

    def churn(self, rate: float) -> Churn:
        return Churn(self.cluster, rate)

    # ---- teardown ----

    def stop(self) -> None:
        """Everything the harness started, by PID, and its state directory."""
        procs = [*self.agents.values(), *([self.keeper] if self.keeper is not None else [])]
        for p in procs:  # all told at once, then each waited for
            p.terminate()
        for p in procs:
            p.stop()
        if self.kubelets is not None:
            self.kubelets.stop.set()
            self.kubelets.join(10)
        self.usage.stop.set()
        if self.usage.is_alive():
            self.usage.join(10)
        if self.reference is not None:
            self.reference.close()
        if self.proxy is not None:
            self.proxy.stop()
        if self.audit is not None:
            self.audit.stop()
        self.cp.stop(wipe=True)
        if HOME.exists():
            shutil.rmtree(HOME)

    def log_summary(self) -> dict[str, dict[str, Any]]:
        """Each process's log lines above info, counted by level and event (the agents log JSON lines)."""
        import json

        out: dict[str, dict[str, Any]] = {}
        for p in [*self.agents.values(), *([self.keeper] if self.keeper else [])]:
            counts: dict[str, Any] = {}
            for line in p.log.read_text(errors="replace").splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if isinstance(e, dict) and e.get("level") not in (None, "info", "debug"):
                    key = f"{e.get('level')} {e.get('event')}"
                    if key not in counts:
                        counts[key] = {"count": 0, "first": str(e.get("error") or e.get("message") or "")[:300]}
                    counts[key]["count"] += 1
            out[p.name] = counts
        return out
