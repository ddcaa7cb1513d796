"""Reading and writing `stateDir/vpa-applied.json` (format: agent.vpa.applied): atomically, a damaged file
set aside with one warning, and a read-only variant for the CLI."""

from __future__ import annotations

import contextlib
from pathlib import Path

from agent.infra.atomicfile import write_atomic
from agent.vpa.applied import FILE, ActuatorState, dumps, loads


def load(state_dir: Path) -> tuple[ActuatorState, str | None]:
    """(the kept state, a warning when the file could not be used; it is then set aside)."""
    path = state_dir / FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ActuatorState(), None
    except OSError as err:
        return (
            ActuatorState(),
            f"{path}: {err.strerror}; VPA targets applied before the restart are decided again",
        )
    try:
        return loads(data), None
    except ValueError as err:
        aside = path.with_name(path.name + ".bad")
        with contextlib.suppress(OSError):  # a file that cannot even be moved is decided again all the same
            path.replace(aside)
        return (
            ActuatorState(),
            f"{path}: {err}; set aside as {aside.name}, VPA targets applied before the restart are decided again",
        )


def save(state_dir: Path, state: ActuatorState) -> None:
    write_atomic(state_dir / FILE, dumps(state))


def load_readonly(state_dir: Path) -> tuple[ActuatorState, str | None]:
    """`load` without setting a damaged file aside (the CLI writes nothing)."""
    path = state_dir / FILE
    if not path.is_file():
        return ActuatorState(), None
    try:
        return loads(path.read_bytes()), None
    except (OSError, ValueError) as err:
        return ActuatorState(), f"{path}: {err}; what the agent applied is not shown"
