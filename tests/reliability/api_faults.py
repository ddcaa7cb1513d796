"""API server faults against the real daemon (a subprocess), in both reconcile paths, on real cgroup v1
files below a private root: down, watch closed, 410 Gone, slow, 429 and 500 on the pod list/watch, and
500 on one pod's status patch (a fault aimed at one pod). Two pods are resized while the fault is on;
afterwards both must reach their values (bare: the kernel at each pod's latest spec; kubelet-owned: the
tiers at the kubelet's allocation, checked by a fresh engine's dry run), and for the aimed fault the
other pod must get its Done condition while the fault still holds.

Violations are checked at every runtime update (the fake CRI server of this process), after every cgroup
write of the daemon (daemon_hook/sitecustomize.py, loaded into its process, snapshots the limit files
after each; tests/reliability/tree_invariant.py checks them) and at the end.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.daemon.harness import CONDITION, Env, api_pod
from tests.reliability.engine_faults import (
    BYSTANDER,
    KUBELET,
    VICTIM,
    Row,
    burstable_pod,
    fresh_plan,
    kubelet_actuates,
)
from tests.reliability.tree_invariant import check_snapshots
from tests.resize.harness import node_on_kernel
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.node import node_object
from tests.support.fakeapi.server import FakeAPIServer
from tests.support.kernel import KernelRoot

HOOK = Path(__file__).with_name("daemon_hook")

PODS = "/api/v1/pods"
FAULTS: tuple[str, ...] = (
    "API server down",
    "watch closed",
    "410 Gone",
    "slow (3 s per request)",
    "429 on list/watch",
    "500 on list/watch",
    "500 on one pod's status patch",
)


@contextlib.contextmanager
def _env(workdir: Path, kubelet: str | None, notes: list[str]) -> Iterator[tuple[Env, KernelRoot]]:
    with node_on_kernel(workdir, notes) as node:
        cluster = FakeCluster(node=node_object())
        cluster.node["status"]["nodeInfo"]["kubeletVersion"] = kubelet or ""
        api = FakeAPIServer(cluster)
        api.start()
        env = Env(workdir, node, cluster, api, node.cri)
        try:
            yield env, node.tree.kernel
        finally:
            for d in env.daemons:
                d.kill()
            api.stop()


@contextlib.contextmanager
def _watched(tops: list[str], out: Path) -> Iterator[None]:
    """The daemon started meanwhile loads daemon_hook/sitecustomize.py: a snapshot of the limit files
    after each of its own cgroup writes, into `out`."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "KCG_INVARIANT_DIRS", "KCG_INVARIANT_OUT")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK), saved["PYTHONPATH"]) if p)
    os.environ["KCG_INVARIANT_DIRS"] = ":".join(tops)
    os.environ["KCG_INVARIANT_OUT"] = str(out)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wait(predicate: Callable[[], Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def _resize(env: Env, name: str, cpu: int, mem: int, kubelet: str | None) -> None:
    spec = {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}, "limits": {"cpu": f"{2 * cpu}m", "memory": f"{2 * mem}Mi"}}
    env.node.resize(name, {c: spec for c in env.node.pods[name].containers})
    if kubelet is not None:
        kubelet_actuates(env.node, name)


def _done(env: Env, name: str) -> bool:
    c = env.cluster.condition(env.uid(name), CONDITION)
    return c is not None and c.get("reason") == "Done"


def _converged(env: Env, name: str, kubelet: str | None) -> bool:
    if kubelet is None:
        return not env.node.mismatches(name) and _done(env, name)
    return not fresh_plan(env.node, kubelet)


def run_scenario(workdir: Path, path: str, fault: str, seed: int, timeout: float = 60.0) -> Row:
    kubelet = KUBELET if path == "kubelet-owned" else None
    row = Row(path, f"API: {fault}")
    with _env(workdir, kubelet, row.notes) as (env, root):
        for name, n in ((VICTIM, 3), (BYSTANDER, 2)):
            env.node.add_pod(burstable_pod(name, n))
            env.publish(name)
        tops = [os.path.realpath(root.cgroupfs / d) for d in (root.dirs["cpu"], root.dirs["memory"])]
        snapshots = workdir / "invariant.jsonl"
        with _watched(tops, snapshots):
            daemon = env.daemon(cgroupfs=str(root.cgroupfs), cgroupRoot=env.node.settings.cgroup_root, resyncPeriod="20s")
        daemon.ready()
        _wait(lambda: env.cluster.open_watches() >= 1, 30)
        cpu, mem = 400 + 100 * (seed % 3), 160 + 32 * (seed % 4)  # never the starting 300m/128Mi
        aimed = fault == "500 on one pod's status patch"

        def changes(cluster: FakeCluster | None = None) -> None:
            for name in (VICTIM, BYSTANDER):
                _resize(env, name, cpu, mem, kubelet)
                (cluster or env.cluster).apply(api_pod(env.node, name))

        if fault == "API server down":
            env.api.stop()
            changes()  # made while it is down: seen only by relisting
            time.sleep(3)
            env.api.start()
            row.injected += 1
        elif fault in ("watch closed", "410 Gone"):
            if fault == "410 Gone":
                env.cluster.compact()
            changes()
            row.injected += env.cluster.drop_watches()
        elif fault.startswith("slow"):
            env.cluster.slow("GET", PODS, 3.0, times=4)
            env.cluster.slow("PATCH", "/status", 3.0, times=4)
            row.injected += 8
            env.cluster.drop_watches()
            changes()
        elif fault in ("429 on list/watch", "500 on list/watch"):
            code = int(fault.split()[0])
            env.cluster.fail("GET", PODS, code, times=5)
            row.injected += 5
            env.cluster.drop_watches()  # so the next watch and list meet the fault
            changes()
        elif aimed:
            env.cluster.fail("PATCH", f"/pods/{VICTIM}/status", 500, times=1000)
            changes()
        if aimed:
            row.spoiled = 0 if _wait(lambda: _converged(env, BYSTANDER, kubelet), timeout) else 1
            # the bystander may converge before the victim's first status patch has met the fault (its pass
            # comes later on a busy machine): the fault holds until it has
            _wait(lambda: env.cluster.count("PATCH", f"/pods/{VICTIM}/status") > 0, timeout)
            row.injected += env.cluster.count("PATCH", f"/pods/{VICTIM}/status")
            env.cluster.faults.clear()
        ok = _wait(lambda: all(_converged(env, n, kubelet) for n in (VICTIM, BYSTANDER)), timeout)
        if not ok:
            lost = [n for n in (VICTIM, BYSTANDER) if not _converged(env, n, kubelet)]
            row.lost = len(lost)
            row.notes.append(f"not converged after {timeout:.0f}s: {lost} {env.node.mismatches(lost[0])[:2]}")
        healthy = daemon.get("/healthz")[0] == 200
        daemon.terminate()
        taken, breached, first = check_snapshots(snapshots, tops)
        row.violations = len(env.node.violations) + len(env.node.check()) + breached
        row.notes += first
        if taken == 0:
            row.notes.append("no snapshot of the daemon's writes was taken: the hook did not load")
            row.violations += 1  # an unchecked run is not a clean one
        row.crashes = len(daemon.logged("reconcile.crashed")) + sum(1 for x in daemon.lines() if "Traceback" in str(x.get("raw", "")))
        if not healthy:
            row.crashes += 1
            row.notes.append("/healthz did not answer 200 at the end")
    return row


def run_all(workdir: Path, progress: Callable[[Row], None] | None = None) -> list[Row]:
    rows = []
    for i, (path, fault) in enumerate((p, f) for p in ("bare", "kubelet-owned") for f in FAULTS):
        row = run_scenario(workdir / f"api-{i}", path, fault, seed=i)
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows
