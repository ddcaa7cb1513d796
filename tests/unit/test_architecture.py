"""The pure core opens no files and starts no processes (import-linter checks its imports; this checks
the calls that need no import: open(), and pathlib/os I/O); in cgroupfs/, one module opens cgroup files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELL_OF_A_FEATURE = {"inputs.py", "state.py"}  # agent.vpa's file reading (the CLI's --vpa) and its state file
CORE = [
    *sorted((ROOT / "agent" / "core").rglob("*.py")),
    *sorted((ROOT / "agent" / "pods" / "sources").glob("*.py")),
    *sorted(p for p in (ROOT / "agent" / "vpa").glob("*.py") if p.name not in SHELL_OF_A_FEATURE),
    *sorted((ROOT / "agent" / "rollout").glob("*.py")),
    *(ROOT / "agent" / "recommender" / n for n in ("histogram.py", "model.py", "estimate.py", "counters.py", "state.py")),
    *(ROOT / "cgroupfs" / n for n in ("types.py", "naming.py", "layout.py", "convert.py", "confine.py", "refusals.py")),
]

IO_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "rmdir", "unlink", "listdir", "scandir", "iterdir", "system", "popen"}


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_module_does_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text())
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in IO_CALLS:
                calls.append(f"{name} at line {node.lineno}")
    assert calls == []


def test_the_core_list_names_the_modules_that_exist() -> None:
    # a module moved away would otherwise silently leave this check
    assert all(p.is_file() for p in CORE)
    assert {p.parent.name for p in CORE} >= {"core", "compute", "plan", "sources", "vpa", "rollout", "recommender"}
    assert all((ROOT / "agent" / "vpa" / n).is_file() for n in SHELL_OF_A_FEATURE)


DESCRIPTOR_CALLS = {"open", "write", "mkdir", "rmdir"}  # os.* calls that reach a file by name or write one


def test_only_cgroupfs_files_opens_cgroup_files() -> None:
    # the choke point of every write into the cgroup tree (SECURITY.md): no other module of the driver
    # makes the calls its confined, no-symlink walk makes
    callers = []
    for path in sorted((ROOT / "cgroupfs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            fn = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(fn, ast.Attribute)
                and isinstance(fn.value, ast.Name)
                and fn.value.id == "os"
                and fn.attr in DESCRIPTOR_CALLS
            ):
                callers.append(str(path.relative_to(ROOT)))
    assert set(callers) == {"cgroupfs/files.py"}
