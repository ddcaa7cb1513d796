"""What a node's pods hold many times over is held once: a pod allocated as it asks is its own effective
view (no copy per pod), a ResourceList without hugepages or other resources shares one empty value, and
a pod's rendered files share its key and each cgroup's directory. Values compare as before."""

from __future__ import annotations

import dataclasses

from agent.core.compute import ComputeConfig, compute_node
from agent.core.diff import desired_files
from agent.core.model import NO_HUGEPAGES, NO_OTHER, Resources
from agent.pods.parse import parse_pod
from agent.resize.allocation import allocation_of, with_allocation
from cgroupfs.layout import Hierarchy, RenderOptions
from tests.resize.manifests import ctr, manifest


def test_a_pod_at_its_own_allocation_is_its_own_view_and_a_changed_one_is_a_copy() -> None:
    pod = parse_pod(manifest("p", [ctr("a", lim={"cpu": "500m", "memory": "128Mi"}), ctr("b", req={"cpu": "100m"})]))
    assert with_allocation(pod, allocation_of(pod)) is pod
    alloc = allocation_of(pod)
    a, b = alloc.containers
    bigger = dataclasses.replace(a, limits=Resources(700, 128 << 20), requests=Resources(700, 128 << 20))
    moved = with_allocation(pod, dataclasses.replace(alloc, containers=(bigger, b)))
    assert moved is not pod and moved.containers[0].limits.cpu_milli == 700
    assert moved.containers[1] is pod.containers[1]  # the container it leaves as it is
    assert allocation_of(moved) == dataclasses.replace(alloc, containers=(bigger, b))


def test_empty_hugepages_and_other_are_one_shared_value_and_compare_as_empty() -> None:
    r = Resources(100, None, {}, frozenset())
    assert r.hugepages is NO_HUGEPAGES and r.other is NO_OTHER
    assert r == Resources(100) and dict(r.hugepages) == {} and not r.other
    with_pages = Resources(None, None, {2 << 20: 4 << 20}, frozenset({"example.com/gpu"}))
    assert dict(with_pages.hugepages) == {2 << 20: 4 << 20} and with_pages.other == {"example.com/gpu"}


def test_a_pods_files_share_its_key_and_each_cgroups_directory() -> None:
    pod = parse_pod(manifest("p", [ctr("a", lim={"cpu": "500m", "memory": "128Mi"})]))
    comp = compute_node([pod], ComputeConfig())
    files = [f for f in desired_files(comp, Hierarchy(v1={"cpu": "cpu", "memory": "memory"}), RenderOptions()) if f.pod]
    assert files and all(f.pod == pod.key for f in files)
    assert len({id(f.pod) for f in files}) == 1
    by_dir: dict[str, set[int]] = {}
    for f in files:
        by_dir.setdefault(f.setting.directory, set()).add(id(f.setting.directory))
    assert all(len(ids) == 1 for ids in by_dir.values())
