"""With a CRI endpoint, `apply` finds each pod's containers by the kubelet's labels when the manifest has
no status, and resizes them with UpdateContainerResources (in-process fake CRI + strict fake tree)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agent.config.settings import from_mapping
from agent.cri.v1 import api_pb2 as pb
from agent.pipeline.apply import reconcile_once
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import FakeCRI
from tests.unit.podbuild import ctr, pod

UID = "dddddddd-0000-4000-8000-000000000004"


def test_containers_found_by_labels_and_resized(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], fake_cri: FakeCRI, tmp_path: Path
) -> None:
    tree = fake_cgroup_tree("v1")
    for name in (
        ("kubepods",),
        ("kubepods", "burstable"),
        ("kubepods", "besteffort"),
        ("kubepods", "burstable", f"pod{UID}"),
    ):
        tree.create(CgroupName(name))
    sandbox = fake_cri.service.add_sandbox(UID, name="web", namespace="default")
    old = fake_cri.service.add_container(sandbox, "app", attempt=0, state=pb.CONTAINER_EXITED)
    new = fake_cri.service.add_container(sandbox, "app", attempt=1)
    for c in (old, new):
        tree.create(f"kubepods/burstable/pod{UID}/{c.id}", controllers=("cpu", "memory"))
    manifest = pod(
        "web",
        [ctr("app", req={"cpu": "250m", "memory": "64Mi"}, lim={"cpu": "500m", "memory": "128Mi"})],
        uid=UID,
    )
    (tmp_path / "pods.json").write_text(json.dumps(manifest))
    settings = from_mapping(
        {
            "cgroupfs": str(tree.root),
            "pods": str(tmp_path / "pods.json"),
            "criEndpoint": fake_cri.endpoint,
            "hugepageSizes": [],
        }
    )
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    updates = [c for c in fake_cri.service.calls if c.method == "UpdateContainerResources"]
    assert updates and {u.request["container_id"] for u in updates} == {
        new.id
    }  # the newest attempt, never the exited one
    # the runtime is told of the pod's new resources before its cgroup is written (best effort)
    sandbox_calls = [c for c in fake_cri.service.calls if c.method == "UpdatePodSandboxResources"]
    assert len(sandbox_calls) == 1 and sandbox_calls[0].request["pod_sandbox_id"] == sandbox.id
    r = fake_cri.service.containers[new.id].resources
    assert (r.cpu_quota, r.cpu_period, r.cpu_shares, r.memory_limit_in_bytes) == (
        50000,
        100000,
        256,
        128 * 1024**2,
    )
