"""A simulated agent node on disk: the kubelet's config file, a cgroup tree of its own (not the host's),
converged as the kubelet and the runtime leave it for the node's pods, the agent's config (the shipped
one, only its paths adapted), and a kubeconfig with a ServiceAccount token bound to the agent's pod on
the node (so the token carries the node-name claim the admission policy checks), through the agent's
own byte-counting proxy port."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from bench.scale.api import Client
from bench.scale.objects import AGENT_NS
from tests.support.cgroup_tree import FakeCgroupTree

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


def agent_config(shipped: dict[str, Any], node: SimNode) -> dict[str, Any]:
    """The shipped config with its paths on this node's directory (nothing else changed)."""
    cfg = dict(shipped)
    cfg["cgroupfs"] = str(node.cgroupfs)
    cfg["kubeletConfig"] = str(node.dir / "kubelet.yaml")
    cfg["stateDir"] = str(node.dir / "state")
    if "criEndpoint" in cfg:  # no runtime here: the kubelet owns container resizes (kubeletVersion v1.36)
        cfg["criEndpoint"] = f"unix://{node.dir / 'cri.sock'}"
    return cfg


def write_files(node: SimNode, shipped: dict[str, Any]) -> None:
    node.dir.mkdir(parents=True, exist_ok=True)
    (node.dir / "kubelet.yaml").write_text(yaml.safe_dump(KUBELET_CONFIG))
    node.config.write_text(yaml.safe_dump(agent_config(shipped, node)))


def converge_tree(node: SimNode, node_obj: dict[str, Any], pods: list[dict[str, Any]]) -> int:
    """The node's cgroup tree (hybrid v1, hugetlb on the unified mount, cgroupfs naming) with every tier,
    pod and container cgroup the node's pods make, holding the values the kubelet computes for them:
    the agent starts on a converged node, as it does beside a real kubelet. Returns the files written."""
    from agent import pipeline
    from agent.config.kubelet import inherit
    from agent.config.settings import load_file
    from agent.core.compute import compute_node
    from agent.core.diff import desired_files
    from agent.kube.node import node_info
    from agent.pods.parse import parse_pod

    tree = FakeCgroupTree(node.cgroupfs, "hybrid")
    settings = inherit(load_file(node.config))
    info = node_info(node_obj, settings)
    settings = replace(settings, allocatable=info.allocatable, kubepods_size=info.kubepods)
    env = pipeline.environment(settings)
    comp = compute_node(tuple(parse_pod(p) for p in pods), settings.compute_config(env.hugepage_sizes))
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
    return len(files)


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
