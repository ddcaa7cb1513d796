"""Regenerate agent/commands/samples/node/cgroupfs: the sample node's cgroup tree as a kubelet left it.

Most values are what the kubelet wrote; a few are deliberately stale, as on a real node right after
an in-place resize (the kubelet refreshes QoS tiers only every 60 s) or on a kubelet that predates
pod-level resources. Run: .venv/bin/python tests/tools/make_sample_node.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from agent.config.settings import load_file
from agent.core.compute import compute_node
from agent.core.diff import desired_files
from agent.pods.load import load_path
from cgroupfs.layout import Hierarchy, RenderOptions

NODE = Path(__file__).resolve().parents[2] / "agent" / "commands" / "samples" / "node"
HIERARCHY = Hierarchy(
    v1={"cpu": "cpu", "memory": "memory"}, unified="unified", unified_controllers=frozenset({"hugetlb"})
)

# what a node shows that the kubelet did not (yet) write: path suffix -> value
DRIFT = {
    # the burstable tier still has the CPU requests of before the last resize
    "cpu/kubepods/burstable/cpu.shares": "1126",
    # api's app container was resized in place from 500m to 1 CPU limit: its cgroup still has the old quota
    "cpu/kubepods/burstable/pod2a7d9c10-5e3b-4c8e-8f21-7a6b5c4d3e02/"
    "d1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90/cpu.cfs_quota_us": "50000",
    # a kubelet without pod-level resources never limited the ide pod cgroup
    "cpu/kubepods/burstable/pod9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b503/cpu.cfs_quota_us": "-1",
    "memory/kubepods/burstable/pod9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b503/memory.limit_in_bytes": "9223372036854771712",
    "memory/kubepods/burstable/pod9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b503/memory.soft_limit_in_bytes": "9223372036854771712",
}
USAGE = "52428800"  # 50 MiB in every memory cgroup


def main() -> None:
    settings = load_file(NODE / "config.yaml")
    loaded = load_path(str(NODE / "pods.yaml"))
    comp = compute_node(loaded.pods, settings.compute_config(settings.hugepage_sizes or ()))
    files = desired_files(comp, HIERARCHY, RenderOptions(), RenderOptions(weight_formula="quadratic"))
    root = NODE / "cgroupfs"
    shutil.rmtree(root, ignore_errors=True)
    (root / "unified").mkdir(parents=True)
    (root / "cpu").mkdir()
    (root / "memory").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    for f in files:
        d = root / f.setting.directory
        d.mkdir(parents=True, exist_ok=True)
        value = DRIFT.get(f.setting.path, f.setting.value)
        if f.setting.filename.startswith("memory.") and value.isdigit() and int(value) < 1 << 62:
            value = str(int(value) // 4096 * 4096)  # the kernel keeps whole pages
        (d / f.setting.filename).write_text(value + "\n")
        if f.setting.directory.startswith("memory/"):
            (d / "memory.usage_in_bytes").write_text(USAGE + "\n")
            (d / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
        if f.setting.directory.startswith("cpu/"):
            for name, default in (
                ("cpu.shares", "1024"),
                ("cpu.cfs_quota_us", "-1"),
                ("cpu.cfs_period_us", "100000"),
            ):
                if not (d / name).exists():
                    (d / name).write_text(default + "\n")
        if f.setting.directory.startswith("memory/"):
            for name in ("memory.limit_in_bytes", "memory.soft_limit_in_bytes"):
                if not (d / name).exists():
                    (d / name).write_text("9223372036854771712\n")
    print(f"wrote {sum(1 for _ in root.rglob('*') if _.is_file())} files under {root}")


if __name__ == "__main__":
    main()
