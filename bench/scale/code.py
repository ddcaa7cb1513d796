"""Which code the agents run. Others change agent/ in this work tree while a run measures it: by default
the harness runs an export of HEAD (`git archive`: agent/, cgroupfs/, deploy/), so a run measures one
commit exactly; SCALE_CODE=tree runs the work tree as it is (and the results say "dirty" when it is)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import provenance

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("agent", "cgroupfs", "deploy")


@dataclass(frozen=True)
class Code:
    root: Path
    label: str  # the commit, "(dirty)" when the work tree differs


def head_commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def export(into: Path, which: str) -> Code:
    """The code to measure: `which` is "head" (an export of HEAD into `into`) or "tree" (this checkout)."""
    if which == "tree":
        return Code(ROOT, provenance.current().label)
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD", *PARTS], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "agent", "cgroupfs"], cwd=into, check=True)
    return Code(into, head_commit())


def use(code: Code) -> None:
    """Import the agent from `code` in this process too (the harness computes each node's cgroup tree with
    the agent's own rules); before anything imports agent or cgroupfs."""
    sys.path.insert(0, str(code.root))
    from bench.scale import agents

    agents.CODE = code.root
