"""Reading and writing `stateDir/vpa-applied.json` (format: agent.vpa.applied): atomically, a damaged file
set aside with one warning, and a read-only variant for the CLI."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from agent.atomicfile import write_atomic
from agent.vpa.applied import FILE, Applied, dumps, loads
from agent.vpa.policy import ContainerTarget


def load(state_dir: Path) -> tuple[dict[str, tuple[str, tuple[ContainerTarget, ...]]], str | None]:
    """(the applied targets, a warning when the file could not be used; it is then set aside)."""
    path = state_dir / FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as err:
        return {}, f"{path}: {err.strerror}; VPA targets applied before the restart are decided again"
    try:
        return loads(data), None
    except ValueError as err:
        aside = path.with_name(path.name + ".bad")
        with contextlib.suppress(OSError):  # a file that cannot even be moved is decided again all the same
            path.replace(aside)
        return {}, f"{path}: {err}; set aside as {aside.name}, VPA targets applied before the restart are decided again"


def save(state_dir: Path, applied: Applied) -> None:
    write_atomic(state_dir / FILE, dumps(applied))


def load_readonly(state_dir: Path) -> tuple[dict[str, Any], str | None]:
    """`load` without setting a damaged file aside (the CLI writes nothing)."""
    path = state_dir / FILE
    if not path.is_file():
        return {}, None
    try:
        return loads(path.read_bytes()), None
    except (OSError, ValueError) as err:
        return {}, f"{path}: {err}; the targets the agent applied are not shown"
