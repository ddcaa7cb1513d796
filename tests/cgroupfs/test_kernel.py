"""cgroupfs.files against this host's real cgroup v1 (and hybrid unified) hierarchies.

Everything happens below a private kcg-test-<random> root (see tests/support/kernel.py), which is
removed afterwards; processes started here are stopped by their PID.
"""

from __future__ import annotations

import pytest

from cgroupfs.convert import V1_UNLIMITED_READBACK, page_round
from cgroupfs.errors import (
    CgroupNotFound,
    CgroupPathRefused,
    MemoryBelowUsage,
    MemswOrderRefused,
    QuotaRefused,
)
from cgroupfs.layout import canonical
from tests.support.kernel import PREFIX, KernelRoot

pytestmark = pytest.mark.kernel

MiB = 1 << 20


@pytest.mark.parametrize(
    ("hierarchy", "name", "value", "read_back"),
    [
        ("cpu", "cpu.shares", "122", "122"),
        ("cpu", "cpu.shares", "1", "2"),  # the kernel clamps to MinShares
        ("cpu", "cpu.shares", "262144", "262144"),
        ("cpu", "cpu.cfs_period_us", "50000", "50000"),
        ("cpu", "cpu.cfs_quota_us", "50000", "50000"),
        ("cpu", "cpu.cfs_quota_us", "-1", "-1"),
        ("memory", "memory.limit_in_bytes", "100000000", str(page_round(100_000_000))),
        ("memory", "memory.limit_in_bytes", "-1", str(V1_UNLIMITED_READBACK)),
        ("memory", "memory.soft_limit_in_bytes", str(64 * MiB), str(64 * MiB)),
    ],
    ids=[
        "shares",
        "shares-clamped",
        "shares-max",
        "period",
        "quota",
        "quota-unlimited",
        "memory-page-rounded",
        "memory-unlimited",
        "soft-limit",
    ],
)
def test_values_written_read_back_as_the_kernel_keeps_them(
    kernel_root: KernelRoot, hierarchy: str, name: str, value: str, read_back: str
) -> None:
    d = kernel_root.mkdirs(hierarchy, "pod")
    kernel_root.files.write(f"{d}/{name}", value)
    text = kernel_root.files.read(f"{d}/{name}")
    assert text is not None
    assert text.strip() == read_back
    if name != "cpu.shares":
        assert canonical(name, text) == canonical(name, value)
    assert kernel_root.files.writes == 1


def test_a_parent_quota_below_a_childs_is_refused_with_quota_refused(kernel_root: KernelRoot) -> None:
    pod = kernel_root.mkdirs("cpu", "pod")
    ctr = kernel_root.mkdirs("cpu", "pod", "ctr")
    files = kernel_root.files
    files.write(f"{pod}/cpu.cfs_quota_us", "200000")
    files.write(f"{ctr}/cpu.cfs_quota_us", "50000")
    with pytest.raises(QuotaRefused) as info:
        files.write(f"{pod}/cpu.cfs_quota_us", "30000")
    assert info.value.path == f"{pod}/cpu.cfs_quota_us"
    assert info.value.value == "30000"
    assert "child cgroup's quota/period may be above" in str(info.value)
    assert files.read(f"{pod}/cpu.cfs_quota_us") == "200000\n"  # the old value is kept
    files.write(f"{ctr}/cpu.cfs_quota_us", "20000")  # shrink the child first ...
    files.write(f"{pod}/cpu.cfs_quota_us", "30000")  # ... then the parent is accepted


def test_memory_limit_below_real_usage_is_memory_below_usage(kernel_root: KernelRoot) -> None:
    pod = kernel_root.mkdirs("memory", "pod")
    hog = kernel_root.start_hog(pod, 40)
    try:
        usage_text = kernel_root.files.read(f"{pod}/memory.usage_in_bytes")
        assert usage_text is not None and int(usage_text) >= 40 * MiB
        with pytest.raises(MemoryBelowUsage) as info:
            kernel_root.files.write(f"{pod}/memory.limit_in_bytes", str(8 * MiB))
        err = info.value
        assert err.usage is not None and err.usage >= 40 * MiB
        assert f"current usage of {err.usage} bytes" in str(err)
        assert hog.poll() is None  # refused, not OOM-killed
        assert kernel_root.files.read(f"{pod}/memory.limit_in_bytes") == f"{V1_UNLIMITED_READBACK}\n"
    finally:
        kernel_root.stop(hog)


def test_memory_above_memsw_is_memsw_order_refused(kernel_root: KernelRoot) -> None:
    pod = kernel_root.mkdirs("memory", "pod")
    if kernel_root.files.read(f"{pod}/memory.memsw.limit_in_bytes") is None:
        pytest.skip("swap accounting is off on this kernel (no memory.memsw.limit_in_bytes)")
    kernel_root.files.write(f"{pod}/memory.limit_in_bytes", str(100 * MiB))
    kernel_root.files.write(f"{pod}/memory.memsw.limit_in_bytes", str(200 * MiB))
    with pytest.raises(MemswOrderRefused, match="memory must stay <= memory"):
        kernel_root.files.write(f"{pod}/memory.limit_in_bytes", str(300 * MiB))
    with pytest.raises(MemswOrderRefused, match=r"lower memory\.limit_in_bytes first"):
        kernel_root.files.write(f"{pod}/memory.memsw.limit_in_bytes", str(50 * MiB))


@pytest.mark.parametrize(
    "below",
    [("gone", "cpu.shares"), ("cpu.weight",)],
    ids=["missing-cgroup", "file-the-kernel-lacks"],
)
def test_enoent_is_cgroup_not_found(kernel_root: KernelRoot, below: tuple[str, ...]) -> None:
    path = kernel_root.path("cpu", *below)
    with pytest.raises(CgroupNotFound):
        kernel_root.files.write(path, "2")
    assert kernel_root.files.read(path) is None


def test_writes_outside_the_test_root_are_refused(kernel_root: KernelRoot) -> None:
    with pytest.raises(CgroupPathRefused, match="outside the cgroups this agent owns"):
        kernel_root.files.write("cpu/cpu.shares", "1024")
    assert kernel_root.name.startswith(PREFIX)


def test_the_root_is_removed_depth_first(kernel_root: KernelRoot) -> None:
    kernel_root.mkdirs("cpu", "a", "b", "c")
    assert kernel_root.files.children(kernel_root.dirs["cpu"]) == ("a",)
    left = kernel_root.cleanup()
    assert left == []
    assert not kernel_root.files.exists(kernel_root.dirs["cpu"])


def test_hugetlb_in_the_unified_hierarchy(kernel_root: KernelRoot) -> None:
    if "unified" not in kernel_root.dirs:
        pytest.skip("no unified hierarchy on this host")
    path = kernel_root.path("unified", "hugetlb.2MB.max")
    with kernel_root.unified_controller("hugetlb") as available:
        if not available:
            pytest.skip("hugetlb is not offered by the unified hierarchy here")
        # enabled in the unified root's subtree_control, hugetlb shows up in our root (its direct child)
        before = kernel_root.files.read(path)
        assert before is not None and canonical("hugetlb.2MB.max", before) == "max"
        kernel_root.files.write(path, str(4 * MiB))
        assert kernel_root.files.read(path) == f"{4 * MiB}\n"
        kernel_root.files.write(path, "max")
        assert kernel_root.files.read(path) == "max\n"


def test_cleanup_stops_its_own_processes_then_removes_the_cgroups(kernel_root: KernelRoot) -> None:
    pod = kernel_root.mkdirs("memory", "pod")
    hog = kernel_root.start_hog(pod, 1)
    procs = kernel_root.files.read(f"{pod}/cgroup.procs")
    assert procs is not None and str(hog.pid) in procs.split()
    assert kernel_root.cleanup() == []
    assert hog.returncode is not None  # stopped and reaped by PID
    assert not kernel_root.files.exists(kernel_root.dirs["memory"])


def test_read_many_reads_the_kernel_files_whole_as_read_does(kernel_root: KernelRoot, both_openers: str) -> None:
    """Over real kernfs files (one openat2 call per file, or the walk): the same texts as read(), a
    multi-line file whole, and a missing cgroup reported as missing."""
    cpu = kernel_root.mkdirs("cpu", "pod", "c1")
    memory = kernel_root.mkdirs("memory", "pod", "c1")
    kernel_root.files.write(f"{cpu}/cpu.shares", "512")
    paths = [f"{cpu}/cpu.shares", f"{cpu}/cpu.cfs_quota_us", f"{cpu}/cpu.stat", f"{memory}/memory.stat",
             f"{memory}/memory.limit_in_bytes", f"{cpu}/no.such.file", kernel_root.path("cpu", "gone", "cpu.shares")]
    texts, dirs = kernel_root.files.read_many(paths)
    assert texts == {p: kernel_root.files.read(p) for p in paths}
    assert texts[f"{cpu}/cpu.shares"] == "512\n" and "total_inactive_file" in (texts[f"{memory}/memory.stat"] or "")
    assert texts[kernel_root.path("cpu", "gone", "cpu.shares")] is None
    assert dirs[cpu] and dirs[memory] and not dirs[kernel_root.path("cpu", "gone")]
