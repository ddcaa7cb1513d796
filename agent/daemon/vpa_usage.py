"""The VPA component's usage loop: every USAGE_S, the working sets of the pods whose VPA decision holds a
memory decrease (the kernel's, which the VPA updater cannot see) — each container's, and for a pod that
sets pod-level resources its pod cgroup's too (the pod-level memory limit stops at it, kept in the
source's usage under POD). A pod is decided again when a working set moved by more than USAGE_STEP since
its last decision, so the rest of the decrease follows once usage allows. Pods with nothing held cost
nothing here. Read-only, confined to the kubepods subtrees; it also drops, every PRUNE_S, what the VPA
source keeps about pods that left the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Final

from agent.core.compute.pod import pod_cgroup_name
from agent.core.compute.qos import compute_qos
from agent.core.model import PodView
from agent.daemon.components import DaemonContext
from agent.infra.logging import get_logger
from agent.recommender.counters import parse_v1, parse_v2, working_set
from agent.recommender.sampler import reader_for, targets
from agent.vpa.podlevel_source import sets_pod_level
from agent.vpa.policy import POD
from agent.vpa.source import VPASource
from cgroupfs.layout import Hierarchy
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import CgroupName, DriverKind

log = get_logger("agent.daemon.vpa")

USAGE_S: Final = 2.0  # how often the working sets of pods holding a memory decrease are read
PRUNE_S: Final = 60.0  # how often what is kept about departed pods is dropped
USAGE_STEP: Final = 0.05  # a held pod is decided again when a working set moved by more than this
V1_POD_FILES: Final = ("memory.usage_in_bytes", "memory.stat")
V2_POD_FILES: Final = ("memory.current", "memory.stat")


def pod_memory_files(
    pod: PodView, root: CgroupName, driver: DriverKind, hierarchy: Hierarchy
) -> tuple[bool, tuple[tuple[str, str], ...]] | None:
    """(whether v2, the pod cgroup's (file name, path below --cgroupfs)) for its working set; None on a
    node without a memory hierarchy. The pod cgroup is the kubelet's name for its QoS class and UID."""
    pod_dir = cgroup_dir(pod_cgroup_name(root, compute_qos(pod).qos, pod.uid), driver)
    if "cpu" in hierarchy.v1 and "memory" in hierarchy.v1:  # as the sampler tells v1 from v2
        return False, tuple((n, f"{hierarchy.v1['memory']}/{pod_dir}/{n}") for n in V1_POD_FILES)
    if hierarchy.unified is not None:
        prefix = f"{hierarchy.unified}/" if hierarchy.unified else ""
        return True, tuple((n, f"{prefix}{pod_dir}/{n}") for n in V2_POD_FILES)
    return None


def moved(before: Mapping[str, int] | None, now: Mapping[str, int]) -> bool:
    if before is None:
        return True
    for name, ws in now.items():
        old = before.get(name)
        if old is None or abs(ws - old) > USAGE_STEP * max(old, 1):
            return True
    return False


class UsageLoop:
    """The loop's reader, built once; `gone` is told the UIDs still on the node after each prune."""

    def __init__(self, ctx: DaemonContext, source: VPASource, gone: Callable[[AbstractSet[str]], None]) -> None:
        self.ctx = ctx
        self.source = source
        self.gone = gone
        env = ctx.env
        self.root, self.driver, self.hierarchy = env.settings.cgroup_root_name, env.settings.cgroup_driver, env.hierarchy
        self.reader = reader_for(ctx.settings.cgroupfs, self.root, self.driver, self.hierarchy)

    def run(self, stop: threading.Event) -> None:
        pruned = time.monotonic()
        while not stop.wait(USAGE_S):
            if time.monotonic() - pruned >= PRUNE_S:  # pods that left the node: forget what was kept
                pruned = time.monotonic()
                live = self.ctx.pods()
                uids = {p.uid for p in live}
                self.source.prune(uids, {p.key for p in live})
                self.gone(uids)
            held = set(self.source.held_pods())
            if held:
                self.once([p for p in self.ctx.pods() if p.key in held])

    def once(self, pods: list[PodView]) -> None:
        """One read of the held pods' working sets into the source; the pods whose moved decided again."""
        try:
            wanted = [(t.pod, t.container, t.v2, t.files) for t in targets(pods, self.root, self.driver, self.hierarchy)]
            for pod in pods:
                files = pod_memory_files(pod, self.root, self.driver, self.hierarchy) if sets_pod_level(pod) else None
                if files is not None:
                    wanted.append((pod.key, POD, *files))
            texts, _ = self.reader.read_many([path for *_, files in wanted for _, path in files])
        except Exception as err:
            log.warning("vpa.usage_error", error=str(err))
            return
        usage: dict[str, dict[str, int]] = {}
        for key, name, v2, paths in wanted:
            read = {n: texts.get(path) for n, path in paths}
            ws = working_set(parse_v2(read) if v2 else parse_v1(read))
            if ws is not None:
                usage.setdefault(key, {})[name] = ws
        current = self.source.usage or {}
        changed = [k for k, u in usage.items() if moved(current.get(k), u)]
        self.source.usage = {**current, **usage}
        if changed:
            self.ctx.refresh([p.uid for p in pods if p.key in changed])
