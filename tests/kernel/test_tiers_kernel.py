"""The QoS tiers move in the same reconcile as a resize, on this machine's real cgroup v1 files.

The resize engine runs against the kernel below a private kcg-test-<hex> root (the `kernel_root` fixture
removes it afterwards, even on failure): tiers made with `ensure_tiers` (createQOSCgroups), a Guaranteed
pod's cgroup and its container's cgroup made as the kubelet and runc would, and the in-process fake CRI
server standing in for the runtime: each UpdateContainerResources is written into the container's real
cgroup as runc would (memory, then CPU), so the engine's read-back is the kernel's.

With qos-reserved memory 100%, the Burstable tier's limit is allocatable - Guaranteed requests and the
BestEffort tier's that - Burstable requests. The pod grows in place: after ONE `engine.reconcile()` the
kernel shows both tiers at their new (page-rounded) limits, the pod and its container at the new one, and
the tier writes came first (BestEffort, then Burstable) before any pod or container memory value grew.
It shrinks back: in that same kind of single pass, the pod's and container's memory shrink first and the
tiers grow back after them (Burstable, then BestEffort). Two tests put real memory in use: the kernel
refuses a tier shrink (usage above the new limit, EBUSY), so the tier is set at the usage and the resize
still completes; and a pod's decrease that waits for its usage keeps the tiers where they are until it
is done, then they grow back in the pass that shrinks the pod.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.config.settings import Settings, from_mapping
from agent.core.compute import compute_pod
from agent.core.model import PodView
from agent.core.plan import CgroupStep
from agent.cri.client import CRIClient
from agent.cri.v1 import api_pb2 as pb
from agent.pipeline.apply import ensure_tiers
from agent.pipeline.execute import CgroupStepRunner, file_runner
from agent.pods.parse import parse_pod
from agent.resize.engine import ResizeEngine
from agent.resize.report import PassReport
from agent.resize.state import Timing
from agent.resize.store import PodStore
from agent.resize.types import ResizeState
from cgroupfs.errors import CgroupError
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fake_cri.state import FakeContainer, Refuse
from tests.support.kernel import KernelRoot
from tests.unit.podbuild import ctr, pod

pytestmark = pytest.mark.kernel

MI = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
UID_G = "44444444-0000-4000-8000-00000000000d"
UID_E = "55555555-0000-4000-8000-00000000000e"
CID_G = hashlib.sha256(b"kcg-tiers-kernel/g/app").hexdigest()
CID_E = hashlib.sha256(b"kcg-tiers-kernel/e/app").hexdigest()
MEMORY_LIMIT = "memory.limit_in_bytes"


def _bytes(quantity: str) -> int:
    units = {"Mi": MI, "Gi": 1 << 30, "M": 10**6, "G": 10**9}
    for suffix in sorted(units, key=len, reverse=True):
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * units[suffix]
    return int(quantity)


def _paged(n: int) -> int:
    """What the kernel keeps of a memory limit: whole pages (rounded down)."""
    return n // PAGE * PAGE


@dataclass
class Rig:
    """The engine wired to the kernel below `root`, and a journal of every write in the order it took
    effect: ("write", path, value) for the agent's pod/tier writes, ("update", container, memory) for the
    runtime's container writes."""

    root: KernelRoot
    settings: Settings
    engine: ResizeEngine
    client: CRIClient
    journal: list[tuple[str, str, str]] = field(default_factory=list)

    def kernel(self, hierarchy: str, *below: str) -> int:
        text = self.root.files.read(self.root.path(hierarchy, *below))
        assert text is not None, below
        return int(text.strip())

    def tier_memory(self, tier: str) -> int:
        return self.kernel("memory", "kubepods", tier, MEMORY_LIMIT)

    def pod_memory(self) -> int:
        return self.kernel("memory", "kubepods", f"pod{UID_G}", MEMORY_LIMIT)

    def container_memory(self) -> int:
        return self.kernel("memory", "kubepods", f"pod{UID_G}", CID_G, MEMORY_LIMIT)

    def index(self, kind: str, suffix: str) -> int:
        """The position of the first journal entry of `kind` whose target ends with `suffix`."""
        found = [i for i, (k, target, _) in enumerate(self.journal) if k == kind and target.endswith(suffix)]
        assert found, self.journal
        return found[0]


def _guaranteed(memory: str) -> dict[str, Any]:
    raw = pod("g", [ctr("app", lim={"cpu": "250m", "memory": memory})], uid=UID_G)
    raw["status"] = {
        "phase": "Running",
        "qosClass": "Guaranteed",
        "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{CID_G}", "state": {"running": {}}}
        ],
    }
    return raw


def _best_effort() -> dict[str, Any]:
    raw = pod("e", [{"name": "app"}], uid=UID_E)
    raw["status"] = {
        "phase": "Running",
        "qosClass": "BestEffort",
        "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{CID_E}", "state": {"running": {}}}
        ],
    }
    return raw


def _runc(root: KernelRoot, pod_dir: tuple[str, ...], cid: str, res: pb.LinuxContainerResources) -> None:
    """runc's side of an update on cgroup v1: memory, then CPU (period before quota), into the real files;
    the kernel's refusal (EBUSY below usage, EINVAL above the parent's quota) fails the update."""
    mem = root.path("memory", *pod_dir, cid)
    cpu = root.path("cpu", *pod_dir, cid)
    try:
        if res.memory_limit_in_bytes:
            root.files.write(f"{mem}/{MEMORY_LIMIT}", str(res.memory_limit_in_bytes))
        if res.cpu_period:
            root.files.write(f"{cpu}/cpu.cfs_period_us", str(res.cpu_period))
        if res.cpu_quota:
            root.files.write(f"{cpu}/cpu.cfs_quota_us", str(res.cpu_quota))
        if res.cpu_shares:
            root.files.write(f"{cpu}/cpu.shares", str(res.cpu_shares))
    except CgroupError as err:
        raise Refuse(str(err)) from err


def _kubelet_starts(
    root: KernelRoot,
    cri: FakeCRI,
    raw: dict[str, Any],
    settings: Settings,
    pod_dir: tuple[str, ...],
    cid: str,
) -> None:
    """The kubelet's part: the pod cgroup, the sandbox, and the container created with its values."""
    view = parse_pod(raw)
    for h in ("cpu", "memory"):
        root.mkdirs(h, *pod_dir, cid)
    sandbox = cri.service.add_sandbox(
        view.uid, view.name, view.namespace, cgroup_parent="/" + "/".join((root.name, *pod_dir))
    )
    (cc,) = compute_pod(view, settings.compute_config(())).containers
    v = cc.values
    created = pb.LinuxContainerResources(
        cpu_period=v.cpu_period,
        cpu_quota=v.cpu_quota,
        cpu_shares=v.cpu_shares,
        memory_limit_in_bytes=v.memory_limit,
    )
    cri.service.add_container(sandbox, "app", container_id=cid, resources=created)
    _runc(root, pod_dir, cid, created)


def _rig(root: KernelRoot, cri: FakeCRI, tmp_path: Path, allocatable: str, raws: list[dict[str, Any]]) -> Rig:
    """Tiers made as createQOSCgroups makes them, the pods started as the kubelet would, and the engine
    converged on them once (its first pass), the journal then emptied."""
    settings = from_mapping(
        {
            "cgroupfs": "/sys/fs/cgroup",
            "cgroupRoot": f"/{root.name}",
            "criEndpoint": cri.endpoint,
            "allocatable": {"cpu": "2", "memory": allocatable},
            "qosReserved": {"memory": "100%"},
            "createQOSCgroups": True,
            "hugepageSizes": [],
            "stateDir": str(tmp_path / "state"),
        }
    )
    env = pipeline.environment(settings)
    ensure_tiers(env)
    dirs: dict[str, tuple[tuple[str, ...], str]] = {}
    for raw in raws:
        view = parse_pod(raw)
        cid = CID_G if view.uid == UID_G else CID_E
        tier = () if view.uid == UID_G else ("besteffort",)
        pod_dir = ("kubepods", *tier, f"pod{view.uid}")
        dirs[cid] = (pod_dir, cid)
        _kubelet_starts(root, cri, raw, settings, pod_dir, cid)
    journal: list[tuple[str, str, str]] = []

    def on_update(container: FakeContainer, merged: pb.LinuxContainerResources) -> None:
        pod_dir, cid = dirs[container.id]
        _runc(root, pod_dir, cid, merged)
        journal.append(("update", container.name, str(merged.memory_limit_in_bytes)))

    cri.service.on_update = on_update

    def recording(inner: CgroupStepRunner) -> CgroupStepRunner:
        def run(step: CgroupStep) -> int:
            written = inner(step)
            journal.append(("write", step.path, step.setting.value))
            return written

        return run

    client = CRIClient(cri.endpoint)
    engine = ResizeEngine(
        settings,
        env,
        client,
        store=PodStore(settings.state_dir),
        cgroup=recording(file_runner(env.files)),
        timing=Timing(backoff_base_s=0.0, backoff_cap_s=0.0, deferred_retry_s=0.0),
    )
    engine.start([parse_pod(raw) for raw in raws])
    first = engine.reconcile()
    _all_ok(first)
    rig = Rig(root, settings, engine, client, journal)
    journal.clear()
    return rig


def _all_ok(report: PassReport) -> None:
    assert not report.errors, report.errors
    assert all(o.ok for o in report.steps), [o.error for o in report.steps if not o.ok]


def _resize(rig: Rig, view: PodView, *, full: bool) -> PassReport:
    """One pod update and ONE reconcile, as the daemon runs them (full=False: a pod event's pass)."""
    rig.journal.clear()
    rig.engine.update(view)
    report = rig.engine.reconcile(full=full)
    _all_ok(report)
    status = rig.engine.status(view.uid)
    assert status is not None and status.state is ResizeState.DONE, status
    return report


CASES = [
    ("1Gi", "64Mi", "128Mi"),  # page-aligned throughout
    ("1000M", "100M", "200M"),  # nothing page-aligned: the kernel keeps whole pages of each limit
]


@pytest.mark.parametrize("full", [True, False], ids=["resync-pass", "event-pass"])
@pytest.mark.parametrize(("allocatable", "before", "after"), CASES, ids=[c[0] for c in CASES])
def test_a_guaranteed_resize_moves_the_tiers_in_the_same_reconcile(
    kernel_root: KernelRoot,
    fake_cri: FakeCRI,
    tmp_path: Path,
    allocatable: str,
    before: str,
    after: str,
    full: bool,
) -> None:
    alloc, small, big = _bytes(allocatable), _bytes(before), _bytes(after)
    rig = _rig(kernel_root, fake_cri, tmp_path, allocatable, [_guaranteed(before)])
    try:
        # converged at the start: kubepods at allocatable, both tiers at allocatable - the pod's request
        assert rig.kernel("memory", "kubepods", MEMORY_LIMIT) == _paged(alloc)
        assert rig.tier_memory("burstable") == _paged(alloc - small)
        assert rig.tier_memory("besteffort") == _paged(alloc - small)
        assert rig.pod_memory() == rig.container_memory() == _paged(small)

        # growth: one reconcile, and the kernel already shows every new value
        report = _resize(rig, parse_pod(_guaranteed(after)), full=full)
        assert rig.tier_memory("burstable") == _paged(alloc - big)
        assert rig.tier_memory("besteffort") == _paged(alloc - big)
        assert rig.pod_memory() == rig.container_memory() == _paged(big)
        assert rig.kernel("memory", "kubepods", MEMORY_LIMIT) == _paged(alloc)
        assert report.shortfalls == []
        # the tiers shrank first, BestEffort before Burstable, before the pod's and container's memory grew
        be = rig.index("write", f"besteffort/{MEMORY_LIMIT}")
        bu = rig.index("write", f"burstable/{MEMORY_LIMIT}")
        pod_mem = rig.index("write", f"pod{UID_G}/{MEMORY_LIMIT}")
        ctr_mem = rig.index("update", "app")
        assert be < bu < pod_mem < ctr_mem, rig.journal
        assert rig.journal[be][2] == rig.journal[bu][2] == str(alloc - big)

        # shrink back: again one reconcile; the pod's values shrink first, the tiers grow back after
        _resize(rig, parse_pod(_guaranteed(before)), full=full)
        assert rig.pod_memory() == rig.container_memory() == _paged(small)
        assert rig.tier_memory("burstable") == _paged(alloc - small)
        assert rig.tier_memory("besteffort") == _paged(alloc - small)
        ctr_mem = rig.index("update", "app")
        pod_mem = rig.index("write", f"pod{UID_G}/{MEMORY_LIMIT}")
        bu = rig.index("write", f"burstable/{MEMORY_LIMIT}")
        be = rig.index("write", f"besteffort/{MEMORY_LIMIT}")
        assert ctr_mem < pod_mem < bu < be, rig.journal

        # and nothing is left to do: the next pass writes nothing
        again = rig.engine.reconcile()
        assert again.writes == 0, again.plan().steps
    finally:
        rig.client.close()


def test_a_tier_the_kernel_cannot_lower_is_set_at_its_usage_and_the_resize_completes(
    kernel_root: KernelRoot, fake_cri: FakeCRI, tmp_path: Path
) -> None:
    """A BestEffort pod really uses 200 MiB; the Guaranteed pod grows 64Mi -> 384Mi on a 512Mi node, so
    the BestEffort tier should drop to 128Mi. The kernel cannot reclaim anonymous memory without swap and
    refuses (EBUSY): the tier is set at its usage instead, in the same pass, and the resize completes; once
    the memory is freed, the next pass lowers the tier to 128Mi."""
    root = kernel_root
    rig = _rig(root, fake_cri, tmp_path, "512Mi", [_guaranteed("64Mi"), _best_effort()])
    try:
        hog = root.start_hog(root.path("memory", "kubepods", "besteffort", f"pod{UID_E}", CID_E), 200)
        usage_before = rig.kernel("memory", "kubepods", "besteffort", "memory.usage_in_bytes")
        assert usage_before > 128 * MI

        report = _resize(rig, parse_pod(_guaranteed("384Mi")), full=False)
        (shortfall,) = report.shortfalls
        assert shortfall.path.endswith(f"besteffort/{MEMORY_LIMIT}")
        assert shortfall.wanted == 128 * MI and shortfall.set_to > 128 * MI
        assert rig.tier_memory("besteffort") == shortfall.set_to  # the kernel took the usage
        assert rig.tier_memory("burstable") == 128 * MI
        assert rig.pod_memory() == rig.container_memory() == 384 * MI
        be = rig.index("write", f"besteffort/{MEMORY_LIMIT}")
        assert rig.journal[be][2] == str(shortfall.set_to)  # the refused 128Mi never took effect
        assert be < rig.index("write", f"burstable/{MEMORY_LIMIT}") < rig.index("update", "app")
        assert hog.poll() is None  # nothing was killed to make room

        root.stop(hog)
        later = rig.engine.reconcile()
        _all_ok(later)
        assert later.shortfalls == []
        assert rig.tier_memory("besteffort") == 128 * MI
    finally:
        rig.client.close()


def test_tiers_do_not_grow_while_the_pods_memory_decrease_waits_for_its_usage(
    kernel_root: KernelRoot, fake_cri: FakeCRI, tmp_path: Path
) -> None:
    """The Guaranteed pod really uses 100 MiB and is resized 128Mi -> 64Mi: its decrease waits for the
    usage (nothing of its memory is written), and the tiers stay at allocatable - 128Mi, still protecting
    what it holds. Once the memory is freed, one event pass shrinks the pod and grows the tiers after it."""
    root = kernel_root
    rig = _rig(root, fake_cri, tmp_path, "1Gi", [_guaranteed("128Mi")])
    try:
        hog = root.start_hog(root.path("memory", "kubepods", f"pod{UID_G}", CID_G), 100)
        rig.engine.update(parse_pod(_guaranteed("64Mi")))
        waiting = rig.engine.reconcile(full=False)
        status = rig.engine.status(UID_G)
        assert status is not None and status.state is ResizeState.IN_PROGRESS, status
        assert status.reason == "MemoryUsageAboveLimit", status
        assert waiting.writes == 0 and rig.journal == []
        assert rig.pod_memory() == rig.container_memory() == 128 * MI
        assert rig.tier_memory("burstable") == rig.tier_memory("besteffort") == 1024 * MI - 128 * MI

        root.stop(hog)
        done = rig.engine.reconcile(full=False)
        _all_ok(done)
        status = rig.engine.status(UID_G)
        assert status is not None and status.state is ResizeState.DONE, status
        assert rig.pod_memory() == rig.container_memory() == 64 * MI
        assert rig.tier_memory("burstable") == rig.tier_memory("besteffort") == 1024 * MI - 64 * MI
        ctr_mem = rig.index("update", "app")
        pod_mem = rig.index("write", f"pod{UID_G}/{MEMORY_LIMIT}")
        bu = rig.index("write", f"burstable/{MEMORY_LIMIT}")
        be = rig.index("write", f"besteffort/{MEMORY_LIMIT}")
        assert ctr_mem < pod_mem < bu < be, rig.journal
    finally:
        rig.client.close()
