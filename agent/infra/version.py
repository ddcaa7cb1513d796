"""The agent's version, commit and Python, for `kube-cgroup-agent version` and the logs.

The version has one source: `agent.__version__`, which setuptools also writes into the distribution. The
commit comes from `KCG_COMMIT` (the image sets it at build time, where no git exists), else from the git
checkout the package runs from, else "unknown".
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def version() -> str:
    from agent import __version__

    return __version__


def commit() -> str:
    env = os.environ.get("KCG_COMMIT", "").strip()
    if env:
        return env
    root = Path(__file__).resolve().parents[2]  # agent/infra/version.py -> the checkout
    if not (root / ".git").exists():
        return "unknown"
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def describe() -> str:
    return f"kube-cgroup-agent {version()} (commit {commit()}, Python {platform.python_version()})"
