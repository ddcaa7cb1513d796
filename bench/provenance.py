"""The code and machine a figure was measured on, so BENCHMARKS.md can say whether its figures agree.

Read once per run, before any result is written: the results and BENCHMARKS.md the run itself rewrites
would otherwise mark every later figure of the same run as measured on a dirty tree.
"""

from __future__ import annotations

import json
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# what the measuring runs write (`make bench`, `make e2e-k8s`): not a change to the measured code
OUTPUTS = ("bench/results", "BENCHMARKS.md", "RELIABILITY.md")


class ProvenanceError(RuntimeError):
    """git could not name the commit the figures are measured at."""


@dataclass(frozen=True)
class Code:
    commit: str
    dirty: bool

    @property
    def label(self) -> str:
        return self.commit + (" (dirty)" if self.dirty else "")


def current(root: Path = ROOT) -> Code:
    """HEAD, and whether tracked files other than the benchmarks' outputs differ from it."""
    excludes = [f":(exclude){p}" for p in OUTPUTS]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *excludes],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise ProvenanceError(f"cannot read the commit of {root}: {err}") from err
    return Code(head, bool(status.strip()))


def machine() -> str:
    return f"{platform.node()} {platform.machine()} {platform.python_implementation()} {platform.python_version()}"


def last_committed(path: Path, root: Path = ROOT) -> str | None:
    """The commit that last changed `path`: all that is known of results written before they recorded
    their own commit."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--abbrev=7", "--", str(path.resolve().relative_to(root))],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError, ValueError):
        return None
    return out or None


def record(path: Path, part: str, update: Callable[[dict[str, Any]], None]) -> None:
    """Update the results file of a figure measured outside `make bench` (several tests each write their
    part of it), recording the commit each part was measured at (BENCHMARKS.md's header names them)."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    update(data)
    data.setdefault("commits", {})[part] = current().label
    path.write_text(json.dumps(data, indent=2) + "\n")
