"""Generated realistic nodes for benchmarks: mixed QoS, sidecars, init containers, overhead, pod-level
resources and hugepages, plus a converged cgroup tree (as the kubelet left it) with a little drift."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

from agent.config.settings import Settings, from_mapping
from agent.core.compute import compute_node
from agent.core.diff import desired_files
from agent.pods.load import parse_text
from cgroupfs.layout import Hierarchy, RenderOptions

HIERARCHY = Hierarchy(v1={"cpu": "cpu", "memory": "memory"}, unified="unified", unified_controllers=frozenset({"hugetlb"}))
CPUS = ["50m", "100m", "250m", "500m", "1", "2"]
MEMS = ["64Mi", "128Mi", "256Mi", "512Mi", "1Gi"]


def _res(rng: random.Random, kind: str) -> dict[str, Any]:
    cpu, mem = rng.choice(CPUS), rng.choice(MEMS)
    if kind == "guaranteed":
        return {"limits": {"cpu": cpu, "memory": mem}}
    if kind == "burstable":
        return {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": "2", "memory": "2Gi"}}
    if kind == "requests":
        return {"requests": {"cpu": cpu, "memory": mem}}
    return {}


def make_pod(i: int, rng: random.Random) -> dict[str, Any]:
    uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    kind = rng.choices(["guaranteed", "burstable", "requests", "besteffort", "podlevel"], [3, 4, 2, 1, 1])[0]
    ctr_kind = "guaranteed" if kind == "guaranteed" else ("besteffort" if kind == "besteffort" else rng.choice(["burstable", "requests"]))
    containers = [{"name": f"c{j}", "resources": _res(rng, ctr_kind)} for j in range(rng.randint(1, 3))]
    spec: dict[str, Any] = {"nodeName": "bench", "containers": containers}
    if kind != "besteffort" and rng.random() < 0.3:  # a sidecar and an init container
        spec["initContainers"] = [
            {"name": "sidecar", "restartPolicy": "Always", "resources": _res(rng, ctr_kind)},
            {"name": "init", "resources": _res(rng, ctr_kind)},
        ]
    if kind == "podlevel":
        spec["resources"] = {"limits": {"cpu": "4", "memory": "4Gi"}}
        for c in containers:
            c["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}} if rng.random() < 0.5 else {}
    if kind == "guaranteed" and rng.random() < 0.1:
        containers[0]["resources"]["limits"]["hugepages-2Mi"] = "64Mi"
    if rng.random() < 0.1:
        spec["overhead"] = {"cpu": "100m", "memory": "64Mi"}
    statuses = [
        {"name": c["name"], "containerID": f"containerd://{rng.getrandbits(256):064x}", "state": {"running": {}}}
        for c in containers
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": f"ns-{i % 20}", "uid": uid},
        "spec": spec,
        "status": {"phase": "Running", "containerStatuses": statuses},
    }


def settings_for(root: Path, pods_file: Path) -> Settings:
    return from_mapping(
        {
            "cgroupfs": str(root),
            "pods": str(pods_file),
            "allocatable": {"cpu": "64", "memory": "256Gi", "hugepages-2Mi": "4Gi"},
            "qosReserved": {"memory": "50%"},
            "hugepageSizes": ["2Mi", "1Gi"],
        }
    )


def make_node(directory: Path, n_pods: int, seed: int = 1, drift: float = 0.02) -> Settings:
    """Write `pods.json` and a converged `cgroupfs/` tree under `directory`; return settings for it."""
    rng = random.Random(seed)
    pods = {"apiVersion": "v1", "kind": "List", "items": [make_pod(i, rng) for i in range(n_pods)]}
    pods_file = directory / "pods.json"
    pods_file.write_text(json.dumps(pods))
    root = directory / "cgroupfs"
    settings = settings_for(root, pods_file)
    loaded = parse_text(pods_file.read_text(), str(pods_file))
    comp = compute_node(loaded.pods, settings.compute_config(settings.hugepage_sizes or ()))
    files = desired_files(comp, HIERARCHY, RenderOptions(), RenderOptions(weight_formula="quadratic"))
    (root / "unified").mkdir(parents=True, exist_ok=True)
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    for sub in ("cpu", "memory"):
        (root / sub).mkdir(exist_ok=True)
    made: set[Path] = set()
    for f in files:
        d = root / f.setting.directory
        if d not in made:
            d.mkdir(parents=True, exist_ok=True)
            made.add(d)
            if f.setting.directory.startswith("memory/"):
                (d / "memory.usage_in_bytes").write_text("1048576\n")
                (d / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
        value = f.setting.value
        if rng.random() < drift and value.lstrip("-").isdigit():
            value = str(int(value) + 4096 * 25) if int(value) > 0 else value
        (d / f.setting.filename).write_text(value + "\n")
    return settings
