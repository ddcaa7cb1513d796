"""A pod's rendered files are reused while its computation is the very same object, and rendered again
(the same as without a cache) as soon as it changes: a resync renders only the pods that changed."""

from __future__ import annotations

from dataclasses import replace

from agent.core.compute import ComputeConfig, compute_node
from agent.core.diff import FilesCache, desired_files
from cgroupfs.layout import Hierarchy, RenderOptions
from tests.unit.podbuild import ctr, pod, view

HIER = Hierarchy(v1={"cpu": "cpu", "memory": "memory"})


def test_the_cache_reuses_only_an_unchanged_computation() -> None:
    pods = [view(pod(f"p{i}", [ctr("c", lim={"cpu": "500m", "memory": "128Mi"})])) for i in range(3)]
    comp = compute_node(pods, ComputeConfig())
    cache: FilesCache = {}
    first = desired_files(comp, HIER, RenderOptions(), cache=cache)
    assert first == desired_files(comp, HIER, RenderOptions())
    assert set(cache) == {p.uid for p in pods}
    again = desired_files(comp, HIER, RenderOptions(), cache=cache)
    pods_first = [f for f in first if f.pod_uid is not None]
    pods_again = [f for f in again if f.pod_uid is not None]
    assert again == first and pods_first and all(a is b for a, b in zip(pods_again, pods_first, strict=True))

    resized = view(pod("p1", [ctr("c", lim={"cpu": "2", "memory": "128Mi"})]))
    comp2 = compute_node([pods[0], resized, pods[2]], ComputeConfig())
    comp2 = replace(comp2, pods=(comp.pods[0], comp2.pods[1], comp.pods[2]))
    got = desired_files(comp2, HIER, RenderOptions(), cache=cache)
    assert got == desired_files(comp2, HIER, RenderOptions())  # p1 rendered again, the others reused
    assert any(f.setting.value == "200000" for f in got if f.pod_uid == resized.uid)
