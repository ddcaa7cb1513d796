"""A simulated agent node on disk: the kubelet's config file, a cgroup tree of its own (not the host's),
converged as the kubelet and the runtime leave it for the node's pods, the agent's config (the shipped
one, only its paths adapted), and a kubeconfig with a ServiceAccount token bound to the agent's pod on
the node (so the token carries the node-name claim the admission policy checks), through the agent's
own byte-counting proxy port. The agent runs with the recommender on, as a user who turns it on runs it
(its interval shortened so that a run sees many: `recommender_section`), and the tree carries every
counter file its sampler reads, with usage (usage.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from bench.scale import usage
from bench.scale.api import Client
from bench.scale.objects import AGENT_NS
from tests.support.cgroup_tree import FakeCgroupTree

if TYPE_CHECKING:  # the agent is imported once bench.scale.code.use chose which code
    from agent.recommender.config import RecommenderSettings
    from agent.recommender.state import RecommenderState

ISSUER = "https://kubernetes.default.svc.cluster.local"
KUBELET_CONFIG = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "cgroupDriver": "cgroupfs",
    "cgroupRoot": "/",
    "failSwapOn": False,
    "failCgroupV1": False,
    "featureGates": {"QOSReserved": True},
    "qosReserved": {"memory": "50%"},
    "kubeReserved": {"cpu": "50m", "memory": "256Mi"},
    "systemReserved": {"cpu": "50m", "memory": "256Mi"},
    "enforceNodeAllocatable": ["pods"],
    "evictionHard": {"memory.available": "100Mi"},
}
MOUNT_CONTROLLER = {"unified": "hugetlb"}
USAGE_BYTES = 48 << 20
# The recommender's interval in the harness: the default (5 minutes) would give a run of 16 minutes three
# intervals; at 20 s the quiet window alone sees nine. goals.py scales what it measures per interval to the
# default.
RECOMMENDER_INTERVAL_S = 20.0


@dataclass(frozen=True)
class SimNode:
    name: str
    index: int
    dir: Path
    proxy_port: int
    metrics_port: int
    health_port: int

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def cgroupfs(self) -> Path:
        return self.dir / "cgroupfs"

    @property
    def log(self) -> Path:
        return self.dir / "agent.log"


def recommender_section(shipped: dict[str, Any], interval_s: float | None) -> dict[str, Any] | None:
    """The shipped `recommender:` section turned on with the harness's interval (the rest as shipped:
    sampleInterval 1 s by default); None, interval_s None: as shipped (off)."""
    if interval_s is None:
        return shipped.get("recommender")
    return {**(shipped.get("recommender") or {}), "enabled": True, "recommenderInterval": f"{interval_s:g}s"}


def agent_config(shipped: dict[str, Any], node: SimNode,
                 recommender_interval_s: float | None = RECOMMENDER_INTERVAL_S) -> dict[str, Any]:
    """The shipped config with its paths on this node's directory and the recommender on at the harness's
    interval (nothing else changed)."""
    cfg = dict(shipped)
    cfg["cgroupfs"] = str(node.cgroupfs)
    cfg["kubeletConfig"] = str(node.dir / "kubelet.yaml")
    cfg["stateDir"] = str(node.dir / "state")
    if "criEndpoint" in cfg:  # no runtime here: the kubelet owns container resizes (kubeletVersion v1.36)
        cfg["criEndpoint"] = f"unix://{node.dir / 'cri.sock'}"
    rec = recommender_section(shipped, recommender_interval_s)
    if rec is not None:
        cfg["recommender"] = rec
    return cfg


def write_files(node: SimNode, shipped: dict[str, Any],
                recommender_interval_s: float | None = RECOMMENDER_INTERVAL_S) -> None:
    node.dir.mkdir(parents=True, exist_ok=True)
    (node.dir / "kubelet.yaml").write_text(yaml.safe_dump(KUBELET_CONFIG))
    node.config.write_text(yaml.safe_dump(agent_config(shipped, node, recommender_interval_s)))


def converge_tree(node: SimNode, node_obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[usage.Counter]:
    """The node's cgroup tree (hybrid v1, hugetlb on the unified mount, cgroupfs naming) with every tier,
    pod and container cgroup the node's pods make, holding the values the kubelet computes for them:
    the agent starts on a converged node, as it does beside a real kubelet. Then the counter files the
    recommender's sampler reads for each container (`sampler_files`). Returns the containers' CPU
    counters, for usage.Updater to advance."""
    from agent import pipeline
    from agent.config.kubelet import inherit
    from agent.config.settings import load_file
    from agent.core.compute import compute_node
    from agent.core.diff import desired_files
    from agent.kube.node import node_info
    from agent.pods.parse import parse_pod
    from agent.recommender.sampler import targets

    tree = FakeCgroupTree(node.cgroupfs, "hybrid")
    settings = inherit(load_file(node.config))
    info = node_info(node_obj, settings)
    settings = replace(settings, allocatable=info.allocatable, kubepods_size=info.kubepods)
    env = pipeline.environment(settings)
    views = tuple(parse_pod(p) for p in pods)
    comp = compute_node(views, settings.compute_config(env.hugepage_sizes))
    files = desired_files(comp, env.hierarchy, env.render_options, env.container_render_options)
    made: set[str] = set()
    for f in files:
        directory = f.setting.directory
        if directory not in made:
            mount, _, below = directory.partition("/")
            tree.create(below, controllers=[MOUNT_CONTROLLER.get(mount, mount)])
            made.add(directory)
            if mount == "memory":
                tree.set(f"{directory}/memory.usage_in_bytes", str(USAGE_BYTES))
        path = tree.path(f.setting.path)
        if path.exists():
            tree.set(f.setting.path, f.setting.value)
        else:  # a file this kernel's seeds lack (a huge page size of the host's): as the kernel would show it
            path.write_text(f.setting.value + "\n")
    wanted = targets(views, settings.cgroup_root_name, settings.cgroup_driver, env.hierarchy)
    requests = {(v.key, c.name): c.requests.cpu_milli for v in views for c in (*v.init_containers, *v.containers)}
    return [sampler_files(tree, t.pod, t.container, dict(t.files), requests.get((t.pod, t.container)), t.memory_request)
            for t in wanted]


def sampler_files(tree: FakeCgroupTree, pod: str, container: str, files: dict[str, str],
                  cpu_request_milli: int | None, memory_request: int | None) -> usage.Counter:
    """One container's v1 counter files as the sampler reads them (`files`: its file names to their paths,
    agent/recommender/sampler.py `targets`): the cpuacct cgroup (the strict tree seeds cpuacct.usage when it
    is created; converging made none, as the kubelet writes nothing there), the working set in
    memory.usage_in_bytes less memory.stat's inactive file pages, the peak, and memory.oom_control's kill
    counter (statistics files the fake tree does not seed). Returns its CPU counter."""
    cores, ws = usage.base_usage(pod, container, cpu_request_milli, memory_request)
    inactive = usage.inactive_of(ws)
    used = ws + inactive
    cpu = files["cpuacct.usage"]
    if not tree.path(cpu).exists():
        mount, _, below = cpu.rpartition("/")[0].partition("/")
        tree.create(below, controllers=[mount])
    for name, text in (("memory.usage_in_bytes", str(used)), ("memory.max_usage_in_bytes", str(used)),
                       ("memory.stat", usage.memory_stat(used, inactive)), ("memory.oom_control", usage.OOM_CONTROL)):
        if name in files:
            tree.path(files[name]).write_text(text if text.endswith("\n") else text + "\n")
    return usage.Counter(tree.path(cpu), cores, pod=pod, container=container, working_set=ws)


# ---- the recommender's histories of a node that has run for days -------------------------------------

# A run starts its agents on fresh nodes, so a history made only by the run is in its first minutes: its
# confidence grows at every interval, its bounds move by more than statusMinChange at each merge and its
# target moves between buckets while few samples are in, and its holder rewrites the VPA's status about every
# interval. A cluster whose agents have run for days is past that. So the harness writes, before the agents
# start, each agent node's recommender state as its sampler would have left it after SEED_DAYS of sampling,
# for the pods of the VPAs in scenario.OWN_SEEDED (the third VPA naming the recommender stays young: the
# transient is measured on it), through the agent's own code (RecommenderState.observe, the call the
# daemon makes for each sample, and the agent's store.save).
SEED_DAYS: Final = 8.0  # the memory window (memoryAggregationInterval 24 h × memoryAggregationIntervalCount 8)
# The shortcut that keeps the setup fast: one sample every SEED_STEP_S through the add path (CPU from the
# usage thread's model: the container's base rate times a log-normal factor; memory its working set, of
# which the add path keeps each aggregation interval's peak), then the CPU sample count set to what one
# sample every SEED_COUNT_STEP_S would have given (VPA's rate, the Metrics Server's once a minute; the agent's
# sampler, every second, would count more, to no effect). The count only feeds the confidence, min(lifespan,
# samples) in confidence intervals: the lifespan's 8 days either way. The CPU histogram then holds one sample
# every 10 minutes: the agent's own samples (every second) outweigh it after some minutes, drawn from the
# same model, so that its percentiles stay where they were.
SEED_STEP_S: Final = 600.0
SEED_COUNT_STEP_S: Final = 60.0
DAY_S: Final = 86_400.0


def named_pods(vpas: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The keys ("namespace/name") of the pods the VPAs select, by the publisher's own rule
    (agent/recommender/publish.py `selects`): the pods whose histories a node publishes for those VPAs."""
    from agent.pods.parse import parse_pod
    from agent.recommender.publish import selects

    chosen = list(vpas)
    views = [parse_pod(p) for p in pods]
    return {v.key for v in views if any(selects(vpa, v) for vpa in chosen)}


def seeded_state(settings: RecommenderSettings, counters: Iterable[usage.Counter], now: float, rng: random.Random,
                 days: float = SEED_DAYS, step_s: float = SEED_STEP_S,
                 count_step_s: float = SEED_COUNT_STEP_S) -> RecommenderState:
    """A recommender state holding, for each counter's container (keyed as the sampler keys it: its pod
    "namespace/name" and its container name), the history of `days` of samples ending at `now`: one every
    `step_s` through RecommenderState.observe (CPU: the base rate times usage.factor, as the usage thread
    advances the counter; memory: the working set), then the sample count of one every `count_step_s`."""
    from agent.recommender.state import RecommenderState
    from agent.recommender.trace import Sample

    state = RecommenderState(settings)
    span = days * DAY_S
    steps = int(span // step_s)
    count = int(span // count_step_s) + 1
    for c in counters:
        if not c.pod or not c.container:
            raise ValueError(f"{c.path}: a counter without its container's key cannot be seeded")
        memory = float(c.working_set)
        for i in range(steps, -1, -1):  # oldest first; the last at `now`
            state.observe(Sample(now - i * step_s, c.pod, c.container, c.cores * usage.factor(rng), memory))
        state.histories[(c.pod, c.container)].samples = count  # the shortcut (above): the count feeds the confidence
    return state


@dataclass(frozen=True)
class Seeded:
    """What seed_recommender wrote: the agent's state file, the containers and the samples added."""

    path: Path
    containers: int
    samples: int
    bytes: int


def seed_recommender(node: SimNode, counters: Sequence[usage.Counter], now: float, rng: random.Random) -> Seeded:
    """Write the node's recommender state (`stateDir`/`recommender.stateFile`, read from the agent's config as
    the daemon reads it) with the histories of `counters`' containers (seeded_state), by the agent's own
    store (atomic write, the daemon's format). Before the agent starts: it loads the file at its start."""
    from agent.config.settings import load_file
    from agent.recommender.store import save

    settings = load_file(node.config)
    path = settings.state_dir / settings.recommender.state_file
    state = seeded_state(settings.recommender, counters, now, rng)
    size = save(path, state)
    return Seeded(path, len(state.histories), len(counters) * (int(SEED_DAYS * DAY_S // SEED_STEP_S) + 1), size)


def token(client: Client, sa: str, bound_pod: dict[str, Any] | None, seconds: int = 24 * 3600) -> str:
    """A TokenRequest for the ServiceAccount, bound to the pod when given (the node-name claim)."""
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    if bound_pod is not None:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": bound_pod["metadata"]["name"],
                                  "uid": bound_pod["metadata"]["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    out = client.call("POST", f"/api/v1/namespaces/{AGENT_NS}/serviceaccounts/{sa}/token", body)
    return str(out["status"]["token"])


def write_kubeconfig(path: Path, port: int, ca: Path, bearer: str) -> None:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "scale", "cluster": {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(ca)}}],
        "users": [{"name": "sa", "user": {"token": bearer}}],
        "contexts": [{"name": "scale", "context": {"cluster": "scale", "user": "sa"}}],
        "current-context": "scale",
    }))
    path.chmod(0o600)
