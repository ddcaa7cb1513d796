"""The sampler's kept-open counter files on this host's real cgroup v1 files, below a private
kcg-test-<random> root: pread at offset 0 reads kernfs afresh, the samples are the path reads', a cgroup
removed and made again under the same path is read through new descriptors (the old ones answer
ENODEV), and no descriptor outlives its container."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator

import pytest

from agent.recommender.counters import V1_EACH_TICK, V1_FILES
from agent.recommender.sampler import Sampler, Target
from cgroupfs.errors import CgroupWriteError
from cgroupfs.pinned import PinnedFiles
from tests.recommender.test_sampler_reads import PathSampler
from tests.support.kernel import KernelRoot, skip_reason

pytestmark = pytest.mark.kernel
T0 = 1_764_000_000.0
MiB = 1 << 20


@pytest.fixture
def root() -> Iterator[KernelRoot]:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    r = KernelRoot.create(controllers=("cpu", "cpuacct", "memory"))
    try:
        yield r
    finally:
        left = r.cleanup()
        assert not left, f"could not remove test cgroups {left}"


def _container(root: KernelRoot) -> Target:
    files = []
    for controller, names in V1_FILES.items():
        leaf = root.mkdirs(controller, "pod", "ctr")  # co-mounted hierarchies: made once, found again
        files.extend((n, f"{leaf}/{n}") for n in names)
    return Target("kcg/pod", "ctr", "ab" * 32, tuple(files), False, None, None)


def _rmdir(root: KernelRoot, reldir: str) -> None:
    for _ in range(100):  # a killed task leaves its cgroup a moment after it is reaped
        try:
            root.files.rmdir(reldir)
            return
        except CgroupWriteError:
            time.sleep(0.02)
    root.files.rmdir(reldir)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_pread_at_zero_reads_the_kernel_files_afresh(root: KernelRoot) -> None:
    target = _container(root)
    group = tuple(dict(target.files)[n] for n in V1_EACH_TICK)
    pinned = PinnedFiles(root.files, budget=100)
    before = pinned.read(group)
    assert before == [t.encode() if (t := root.files.read(p)) is not None else None for p in group]
    usage = dict(zip(V1_EACH_TICK, before, strict=True))["memory.usage_in_bytes"]
    assert usage is not None and int(usage) < MiB
    root.start_hog(root.path("memory", "pod", "ctr"), 24)
    after = dict(zip(V1_EACH_TICK, pinned.read(group), strict=True))  # the same descriptors, read again
    text = root.files.read(root.path("memory", "pod", "ctr", "memory.usage_in_bytes"))
    assert after["memory.usage_in_bytes"] == (text or "").encode()
    assert int(after["memory.usage_in_bytes"] or 0) >= 24 * MiB
    assert len(pinned) == 1
    pinned.close()


def _until_still(root: KernelRoot, counter: str) -> None:
    """Wait until the hog is asleep on its pipe: it says "ready" a few instructions before it blocks,
    and a tick between those would see its CPU counter move."""
    deadline = time.monotonic() + 5.0
    previous = root.files.read(counter)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = root.files.read(counter)
        if now == previous:
            return
        previous = now
    raise AssertionError(f"{counter} never held still")


def test_samples_match_the_path_reads_and_a_recreated_cgroup_gets_new_descriptors(root: KernelRoot) -> None:
    target = _container(root)
    baseline = _fds()
    hog = root.start_hog(root.path("memory", "pod", "ctr"), 16)  # its two pipes are closed when it stops
    root.files.write(root.path("cpuacct", "pod", "ctr", "cgroup.procs"), str(hog.pid))
    _until_still(root, root.path("cpuacct", "pod", "ctr", "cpuacct.usage"))
    with_hog = _fds()
    sampler, reference = Sampler(root.files), PathSampler(root.files)
    for n in range(3):  # the hog sleeps on its pipe: the counters hold still between the two reads
        assert sampler.tick(T0 + n, [target]) == reference.tick(T0 + n, [target])
    assert _fds() == with_hog + len(V1_EACH_TICK) + 2  # and memory.stat and the OOM-kill counter
    memory_ctr = root.path("memory", "pod", "ctr")
    old = os.open(f"{root.cgroupfs}/{memory_ctr}/memory.usage_in_bytes", os.O_RDONLY | os.O_CLOEXEC)
    try:
        root.stop(hog)
        _rmdir(root, memory_ctr)
        root.files.mkdir(memory_ctr)  # the same path, a new cgroup
        with pytest.raises(OSError) as info:
            os.pread(old, 64, 0)
        assert info.value.errno == errno.ENODEV
    finally:
        os.close(old)
    samples, _ = sampler.tick(T0 + 3, [target])
    assert samples == reference.tick(T0 + 3, [target])[0]
    assert samples[0].memory is not None and samples[0].memory < MiB  # the new, empty cgroup's usage
    sampler.tick(T0 + 4, [])
    assert _fds() == baseline
    sampler.close()
