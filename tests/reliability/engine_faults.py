"""Fault injection at every step of a resize, in both reconcile paths, on this host's real cgroup v1 files.

Each scenario is one node (a private kcg-test-<hex> root, the fake CRI server, the daemon's own
reconciler as `select_reconciler` builds it, a fake clock so its real backoff is waited out in no time)
with two pods resized at once: a *victim* that a fault is aimed at, and a *bystander* that must not
notice. One faulty round of passes (what the daemon runs on those pods' events), then the fault is
cleared and rounds run until both converge. Figures per scenario:

- injected: faults that actually fired;
- violations: child above parent at any intermediate state (the harness checks the real files after
  every agent write and every runtime update);
- lost: pods whose kernel values are not those of their latest spec at the end (bare path), or whose
  tiers are not those of the kubelet's allocation (kubelet-owned path);
- spoiled: a bystander not converged after the faulty round (only for faults aimed at one pod);
- crashes: an exception escaping the reconciler (the daemon would log a traceback).

Bare path: the agent writes pod cgroups and resizes containers over CRI. Kubelet-owned path (v1.33+):
the kubelet resizes (played here: spec, allocation, pod and container cgroups), the agent moves the
tiers and keeps its records.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from agent.core.ownership import resolve
from agent.core.plan import CgroupStep
from agent.daemon import select_reconciler
from agent.daemon.engine_reconciler import EngineReconciler
from agent.resize.engine import ResizeEngine
from agent.resize.store import PodStore
from tests.reliability.syscalls import SHORT, Fault, SyscallFaults
from tests.resize.harness import ResizeNode, node_on_kernel
from tests.resize.manifests import ctr, manifest
from tests.support.fake_cri.servicer import RUNC_WRAP

KUBELET = "v1.36.0"
FAULTY_ROUNDS = 3
NO_STOP = lambda: False  # noqa: E731
VICTIM, BYSTANDER = "victim", "bystander"

RUNC_EINVAL = RUNC_WRAP.format('failed to write "50000": write {p}/cpu.cfs_quota_us: invalid argument')
RUNC_EBUSY = RUNC_WRAP.format("unable to set memory limit to 16777216 (current usage: 42459136, peak usage: 43888640)")
CRI_FAULTS: tuple[tuple[str, grpc.StatusCode, str], ...] = (
    ("UNAVAILABLE", grpc.StatusCode.UNAVAILABLE, 'connection error: desc = "transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: connection refused"'),
    ("DEADLINE_EXCEEDED", grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"),
    ("NOT_FOUND", grpc.StatusCode.NOT_FOUND, 'an error occurred when try to find container "{cid}": not found'),
    ("UNKNOWN runc EINVAL", grpc.StatusCode.UNKNOWN, RUNC_EINVAL),
    ("UNKNOWN runc EBUSY", grpc.StatusCode.UNKNOWN, RUNC_EBUSY),
)
WRITE_FAULTS: tuple[tuple[str, int], ...] = (
    ("EBUSY", errno.EBUSY),
    ("EINVAL", errno.EINVAL),
    ("ENOENT", errno.ENOENT),
    ("EACCES", errno.EACCES),
    ("ENOSPC", errno.ENOSPC),
    ("short write", SHORT),
)
CHECKPOINT_FAULTS = ("record fsync EIO", "disk full (ENOSPC)", "torn record", "zero-length record")


@dataclass
class Row:
    path: str  # "bare" | "kubelet-owned"
    fault: str
    injected: int = 0
    violations: int = 0
    lost: int = 0
    spoiled: int | None = None  # None: the fault is node-wide
    crashes: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def burstable_pod(name: str, containers: int) -> dict[str, Any]:
    """Burstable (requests half the limits), so a resize moves the burstable tier too."""
    req, lim = {"cpu": "300m", "memory": "128Mi"}, {"cpu": "600m", "memory": "256Mi"}
    return manifest(name, [ctr(f"c{i}", req=dict(req), lim=dict(lim)) for i in range(1, containers + 1)])


def _target(rng: random.Random, containers: int) -> dict[str, dict[str, Any]]:
    out = {}
    for i in range(1, containers + 1):
        cpu, mem = rng.choice([100, 200, 400, 600]), rng.choice([64, 96, 192, 256])
        out[f"c{i}"] = {
            "requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"},
            "limits": {"cpu": f"{2 * cpu}m", "memory": f"{2 * mem}Mi"},
        }
    return out


class Scenario:
    """One node, two pods, one reconciler; the rounds of passes the daemon would run."""

    def __init__(self, node: ResizeNode, kubelet: str | None) -> None:
        self.node = node
        self.kubelet = kubelet
        self.now = 1000.0
        self.crashes = 0
        self.rec = self._reconciler()

    def _reconciler(self) -> EngineReconciler:
        rec = select_reconciler(self.node.settings, self.node.env, resolve({}, self.kubelet, {}), self.node.client)
        assert isinstance(rec, EngineReconciler)
        rec.engine.clock = lambda: self.now
        rec.clock = lambda: self.now
        return rec

    def start(self) -> list[str]:
        return self.rec.start(self.node.views())

    def restart(self) -> list[str]:
        """The agent killed and started again: a new reconciler over the same state directory."""
        self.rec = self._reconciler()
        return self.start()

    def round(self) -> None:
        """A pod event for each pod, then the tiers item; time moves past any backoff."""
        self.now += 120.0
        for call in (
            lambda: self.rec.reconcile_pod(self.node.view(VICTIM), NO_STOP),
            lambda: self.rec.reconcile_pod(self.node.view(BYSTANDER), NO_STOP),
            lambda: self.rec.reconcile_tiers(self.node.views(), NO_STOP),
        ):
            try:
                call()
            except Exception:  # what would reach the daemon's worker as a traceback
                self.crashes += 1

    def faulty_rounds(self) -> None:
        """While a fault holds: the first attempt and the retries after each backoff meet it."""
        for _ in range(FAULTY_ROUNDS):
            self.round()

    def resize(self, rng: random.Random) -> None:
        for name, n in ((VICTIM, 3), (BYSTANDER, 2)):
            self.node.resize(name, _target(rng, n))
            if self.kubelet is not None:
                self._kubelet_actuates(name)

    def _kubelet_actuates(self, pod: str) -> None:
        kubelet_actuates(self.node, pod)

    def lost(self) -> dict[str, list[str]]:
        """What is not where the latest spec (bare: each pod) or the kubelet's allocation (the tiers)
        puts it, by pod or "tiers"."""
        out: dict[str, list[str]] = {}
        if self.kubelet is None:
            for pod in (VICTIM, BYSTANDER):
                if m := self.node.mismatches(pod):
                    out[pod] = m
        if plan := self._fresh_plan():
            out["tiers"] = plan
        return out

    def converged(self, pod: str) -> bool:
        return self.kubelet is not None or not self.node.mismatches(pod)

    def _fresh_plan(self) -> list[str]:
        return fresh_plan(self.node, self.kubelet)


def _limit(text: str) -> float:
    v = int(text)
    return float("inf") if v < 0 or v >= 1 << 62 else float(v)


def kubelet_actuates(node: ResizeNode, pod: str) -> None:
    """The kubelet admits the resize and writes the pod's and its containers' cgroups, per resource
    (memory, then CPU): a growing pod before its containers, a shrinking one after them, and the
    containers' decreases before their increases."""
    from agent.core.compute import compute_pod
    from agent.core.compute.container import compute_container

    info, view = node.pods[pod], node.view(pod)
    for c in info.raw["spec"]["containers"]:
        info.allocated[c["name"]] = dict(c["resources"].get("requests", {}))
    cfg = node.settings.compute_config(())
    pv = compute_pod(view, cfg).values
    new = {c.name: compute_container(view, c, cfg).values for c in view.containers}
    pod_mem = str(pv.memory_limit // 4096 * 4096) if pv.memory_limit else None
    pod_quota = str(pv.cpu_quota if pv.cpu_quota is not None else -1)
    for resource in ("memory", "cpu"):
        path = node.pod_path(pod, "memory.limit_in_bytes" if resource == "memory" else "cpu.cfs_quota_us")
        want = pod_mem if resource == "memory" else pod_quota
        if want is None:
            continue
        grows = _limit(want) >= _limit(node.read(path))
        if grows:
            node.tree.set(path, want)
        for cid, values in _container_order(node, pod, new, resource):
            if resource == "memory":
                node._write_container(cid, 0, 0, 0, values.memory_limit)
            else:
                node._write_container(cid, values.cpu_shares, values.cpu_quota, values.cpu_period, 0)
        if not grows:
            node.tree.set(path, want)
        node.violations.extend(node.check())
    node.tree.set(node.pod_path(pod, "cpu.shares"), str(pv.cpu_shares))

def _container_order(node: ResizeNode, pod: str, new: dict[str, Any], resource: str) -> list[tuple[str, Any]]:
    """Decreases first."""
    info = node.pods[pod]
    out = []
    for name, values in new.items():
        cid = info.containers[name]
        filename = "memory.limit_in_bytes" if resource == "memory" else "cpu.cfs_quota_us"
        now = _limit(node.read(node.container_path(pod, name, filename)))
        want = values.memory_limit if resource == "memory" else values.cpu_quota
        out.append((_limit(str(want)) - now, cid, values))
    return [(cid, values) for _, cid, values in sorted(out, key=lambda t: t[0])]


def fresh_plan(node: ResizeNode, kubelet: str | None) -> list[str]:
    """A new engine with no records, as after losing the state directory: its dry run must have no
    cgroup step the agent owns, i.e. the kernel already holds what the pods need."""
    fresh_dir = node.settings.state_dir.with_name("fresh-" + node.settings.state_dir.name)
    engine = ResizeEngine(node.settings, node.env, None, store=PodStore(fresh_dir), kubelet_admits=kubelet is not None)
    daemon = select_reconciler(node.settings, node.env, resolve({}, kubelet, {}), None)
    assert isinstance(daemon, EngineReconciler)
    engine.owned, engine.to_read = daemon.engine.owned, daemon.engine.to_read
    engine.start(node.views(), persist=False)
    report = engine.dry_run()
    return [f"still to write: {o.step.path}" for p in report.passes for o in p.execution.outcomes if isinstance(o.step, CgroupStep)]


def _abs(node: ResizeNode, relpath: str) -> str:
    return str(node.tree.path(relpath))


def run_scenario(workdir: Path, path: str, kind: str, name: str, arg: Any, seed: int) -> Row:
    """One fault, one node: arm, one faulty round, clear, converge; the figures."""
    kubelet = KUBELET if path == "kubelet-owned" else None
    row = Row(path, f"{kind}: {name}")
    with node_on_kernel(workdir, row.notes) as node:
        node.add_pod(burstable_pod(VICTIM, 3))
        node.add_pod(burstable_pod(BYSTANDER, 2))
        sc = Scenario(node, kubelet)
        sc.start()
        sc.round()
        rng = random.Random(seed)
        if kind != "drift":
            sc.resize(rng)
        faults = SyscallFaults()
        row.spoiled = _inject(sc, faults, row, kind, name, arg, workdir)
        faults.clear()
        for _ in range(8):
            if not sc.lost():
                break
            sc.round()
        row.injected += faults.injected
        lost = sc.lost()
        row.lost = len(lost)
        row.notes += [f"{k}: {v[0]}" for k, v in lost.items()]
        row.violations = len(node.violations)
        row.notes += node.violations[:3]
        row.crashes = sc.crashes
    return row


def _inject(sc: Scenario, faults: SyscallFaults, row: Row, kind: str, name: str, arg: Any, workdir: Path) -> int | None:
    """Arm the fault, run the faulty round; returns spoiled (None for a node-wide fault)."""
    node = sc.node
    victim_dir = _abs(node, f"cpu/{node.pods[VICTIM].pod_dir}")
    victim_mem = _abs(node, f"memory/{node.pods[VICTIM].pod_dir}")
    victim_uid = str(node.pods[VICTIM].raw["metadata"]["uid"])
    per_pod = True
    if kind == "cri":
        code, message = arg
        for cid in node.pods[VICTIM].containers.values():
            node.cri.service.inject_error("UpdateContainerResources", code, message.format(cid=cid, p=victim_dir), times=3 * FAULTY_ROUNDS, container_id=cid)
        before = len(node.cri.service.calls_of("UpdateContainerResources"))
        sc.faulty_rounds()
        victim_ids = set(node.pods[VICTIM].containers.values())
        calls = node.cri.service.calls_of("UpdateContainerResources")[before:]
        row.injected += min(3 * FAULTY_ROUNDS * len(victim_ids), sum(1 for c in calls if c.request.get("container_id") in victim_ids))
        for cid in victim_ids:
            node.cri.service.targeted.pop(("UpdateContainerResources", cid), None)
    elif kind == "cgroup write":
        if sc.kubelet is None:
            def match(p: str) -> bool:
                return os.path.dirname(p) in (victim_dir, victim_mem)
        else:  # the tiers are the agent's writes there: node-wide
            per_pod = False
            tiers = {_abs(node, f"{c}{node.settings.cgroup_root}/kubepods{t}") for c in ("cpu", "memory") for t in ("", "/burstable", "/besteffort")}

            def match(p: str) -> bool:
                return os.path.dirname(p) in tiers
        call = "open" if arg == errno.ENOENT else "write"
        faults.add(Fault(call, arg, match, times=-1, label=name))  # type: ignore[arg-type]
        with faults.armed():
            sc.faulty_rounds()
    elif kind == "drift":  # no resize: both pods' values reverted, the victim's repair refused
        node.tree.set(node.pod_path(VICTIM, "memory.limit_in_bytes"), str(900 << 20))
        node.tree.set(node.pod_path(BYSTANDER, "cpu.shares"), "3")
        faults.add(Fault("write", arg, lambda p: os.path.dirname(p) == victim_mem, times=-1, label=name))
        with faults.armed():
            sc.faulty_rounds()
    elif name == "record fsync EIO":
        faults.add(Fault("fsync", errno.EIO, lambda p: f"/.{victim_uid}.json." in p, times=-1, label=name))
        with faults.armed():
            sc.faulty_rounds()
    elif name == "disk full (ENOSPC)":
        per_pod = False
        state = str(node.settings.state_dir)
        faults.add(Fault("write", errno.ENOSPC, lambda p: p.startswith(state), times=-1, label=name))
        with faults.armed():
            sc.faulty_rounds()
    else:  # a torn or zero-length record, found at the next start
        per_pod = True
        sc.round()
        record = node.settings.state_dir / "pods" / f"{victim_uid}.json"
        data = record.read_bytes()
        record.write_bytes(data[: len(data) // 2] if name == "torn record" else b"")
        row.injected += 1
        warnings = sc.restart()
        if not any("rebuilt from the kernel" in w for w in warnings):
            row.notes.append(f"the damaged record was not reported: {warnings}")
            row.crashes += 1
        sc.round()
    if not per_pod:
        return None
    return 0 if sc.converged(BYSTANDER) else 1


def scenarios() -> list[tuple[str, str, str, Any]]:
    """(path, kind, name, argument) of every scenario."""
    out: list[tuple[str, str, str, Any]] = []
    for path in ("bare", "kubelet-owned"):
        if path == "bare":
            out += [(path, "cri", n, (code, msg)) for n, code, msg in CRI_FAULTS]
        out += [(path, "cgroup write", n, code) for n, code in WRITE_FAULTS]
        if path == "bare":  # the agent repairs pod values only where it owns them
            out.append((path, "drift", "one pod's repair refused (EACCES)", errno.EACCES))
        out += [(path, "checkpoint", n, None) for n in CHECKPOINT_FAULTS]
    return out


def run_all(workdir: Path, rounds: int = 1, progress: Callable[[Row], None] | None = None) -> list[Row]:
    """Every scenario `rounds` times (different seeds), the rows summed per scenario."""
    rows: dict[tuple[str, str], Row] = {}
    for r in range(rounds):
        for i, (path, kind, name, arg) in enumerate(scenarios()):
            one = run_scenario(workdir / f"r{r}-{i}", path, kind, name, arg, seed=r * 1000 + i)
            acc = rows.setdefault((path, one.fault), Row(path, one.fault, spoiled=None if one.spoiled is None else 0))
            acc.injected += one.injected
            acc.violations += one.violations
            acc.lost += one.lost
            acc.crashes += one.crashes
            if one.spoiled is not None:
                acc.spoiled = (acc.spoiled or 0) + one.spoiled
            acc.notes += one.notes
            if progress is not None:
                progress(one)
    return list(rows.values())
