"""memory.max below what a cgroup already holds, on a real cgroup v2 kernel: the write succeeds where v1
refuses it (EBUSY); the kernel then reclaims what it can (clean page cache) and OOM-kills what it cannot
(written anonymous memory: no swap in the guest). On v2 no refusal protects a process from a limit
lowered below its usage.

Runs only inside the guest of `make e2e-v2` (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cgroupfs.layout import MEMORY_MAX
from tests.v2guest import guestlib
from tests.v2guest.guestlib import CgroupTree, read_text, write_text

pytestmark = pytest.mark.v2guest

MiB = 1 << 20


ANON_64M = (
    "import time\n"
    "b = bytearray(b'x') * (64 << 20)\n"  # written, so every page is charged
    "print('ready', flush=True)\n"
    "time.sleep(3600)\n"
)


def test_memory_max_below_anon_usage_oom_kills_not_ebusy(cgroup_tree: CgroupTree) -> None:
    """v1 refuses a limit below usage (EBUSY); v2 takes it, reclaims what it can, then OOM-kills.

    No swap in the guest, so 64 MiB of written anonymous memory cannot be reclaimed.
    """
    path = cgroup_tree.mkdir("pod")
    child = cgroup_tree.spawn("pod", ANON_64M)
    assert child.wait_ready() == "ready"
    assert int(read_text(path / "memory.current")) >= 64 * MiB
    before = guestlib.keyed(path / "memory.events")

    write_text(path / MEMORY_MAX, str(16 * MiB))  # no OSError: the write itself succeeds

    assert child.proc.wait(timeout=60) == -9, "the process over the new limit is SIGKILLed"
    events = guestlib.keyed(path / "memory.events")
    assert events["oom_kill"] == before["oom_kill"] + 1
    assert events["oom"] >= before["oom"] + 1
    assert read_text(path / MEMORY_MAX) == str(16 * MiB)
    assert int(read_text(path / "memory.current")) <= 16 * MiB


def test_memory_max_below_page_cache_usage_reclaims(cgroup_tree: CgroupTree, unique: str) -> None:
    """Clean page cache over the new limit is reclaimed; the process lives on."""
    path = cgroup_tree.mkdir("pod")
    data = Path(f"/var/tmp/kca-v2test-{unique}.bin")
    code = (
        "import os, time\n"
        f"p = {str(data)!r}\n"
        "with open(p, 'wb') as f:\n"
        "    for _ in range(48):\n"
        "        f.write(b'y' * (1 << 20))\n"
        "    f.flush(); os.fsync(f.fileno())\n"
        "with open(p, 'rb') as f:\n"
        "    while f.read(1 << 20):\n"
        "        pass\n"
        "print('ready', flush=True)\n"
        "time.sleep(3600)\n"
    )
    try:
        child = cgroup_tree.spawn("pod", code)
        assert child.wait_ready() == "ready"
        stat = guestlib.keyed(path / "memory.stat")
        assert stat["file"] >= 40 * MiB, stat
        write_text(path / MEMORY_MAX, str(24 * MiB))
        assert child.proc.poll() is None, "the process survived"
        assert int(read_text(path / "memory.current")) <= 24 * MiB
        assert guestlib.keyed(path / "memory.events")["oom_kill"] == 0
    finally:
        data.unlink(missing_ok=True)
