"""The API campaign's check of the daemon's own writes: the rule on one snapshot, row by row, and the
hook in a child process catching a breach it wrote (on plain files in a temp dir standing for the tree)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.tree_invariant import breaches, check_snapshots

TOP = "/r"
POD = f"{TOP}/kubepods/burstable/pod1"
BASE = {
    f"{TOP}/kubepods/memory.limit_in_bytes": "8000",
    f"{TOP}/kubepods/burstable/memory.limit_in_bytes": "4000",
    f"{POD}/memory.limit_in_bytes": "1000",
    f"{POD}/cpu.cfs_quota_us": "100000",
    f"{POD}/cpu.cfs_period_us": "100000",
    f"{POD}/a/memory.limit_in_bytes": "600",
    f"{POD}/a/cpu.cfs_quota_us": "50000",
    f"{POD}/a/cpu.cfs_period_us": "100000",
    f"{POD}/b/memory.limit_in_bytes": "400",
    f"{POD}/b/cpu.cfs_quota_us": "50000",
    f"{POD}/b/cpu.cfs_period_us": "100000",
    f"{POD}/sandbox/memory.limit_in_bytes": "9223372036854771712",  # unlimited: bounded by the pod
    f"{POD}/sandbox/cpu.cfs_quota_us": "-1",
    f"{POD}/sandbox/cpu.cfs_period_us": "100000",
}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, None),
        ({f"{POD}/a/memory.limit_in_bytes": "1200"}, "a child's memory 1200 above 1000"),
        ({f"{POD}/a/memory.limit_in_bytes": "700"}, "children's memory sum 1100 above 1000"),
        ({f"{POD}/a/cpu.cfs_quota_us": "150000"}, "a child's cpu 1.500 above 1.000"),
        ({f"{POD}/a/cpu.cfs_quota_us": "60000"}, "children's cpu sum 1.100 above 1.000"),
        ({f"{POD}/a/cpu.cfs_period_us": "50000"}, "children's cpu sum 1.500 above 1.000"),
        ({f"{POD}/memory.limit_in_bytes": "5000"}, "a child's memory 5000 above 4000"),  # the pod above its tier
        ({f"{POD}/cpu.cfs_quota_us": "-1"}, None),  # an unlimited pod bounds nothing
    ],
)
def test_one_snapshot(change: dict[str, str], expected: str | None) -> None:
    found = breaches({**BASE, **change}, [TOP])
    if expected is None:
        assert found == []
    else:
        assert any(expected in f for f in found), found


def test_the_hook_in_a_child_process_records_the_tree_after_each_write_and_a_breach_is_found(tmp_path: Path) -> None:
    top = tmp_path / "tree"
    for path, text in BASE.items():
        f = top / path.removeprefix(f"{TOP}/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    out = tmp_path / "snapshots.jsonl"
    hook = Path(__file__).with_name("daemon_hook")
    target = top / "kubepods/burstable/pod1/a/memory.limit_in_bytes"
    code = f"import os\nfd = os.open({str(target)!r}, os.O_WRONLY | os.O_TRUNC)\nos.write(fd, b'1200')\nos.close(fd)\n" \
           f"fd = os.open({str(tmp_path / 'elsewhere')!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')\n"
    env = {**os.environ, "PYTHONPATH": str(hook), "KCG_INVARIANT_DIRS": str(top), "KCG_INVARIANT_OUT": str(out)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    taken, breached, first = check_snapshots(out, [str(top)])
    assert (taken, breached) == (1, 1), first  # the write outside the tree took no snapshot
    assert "a child's memory 1200 above 1000" in first[0] and first[0].startswith("after ")
