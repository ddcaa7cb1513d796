"""The recommender's state on the node: one JSON file, written atomically (temp file, fsync, rename, fsync
of the directory), versioned; a file that cannot be read back starts the recommender empty with one
warning — never a crash, never a half-read history."""

from __future__ import annotations

import json
from pathlib import Path

from agent.infra.atomicfile import write_atomic
from agent.recommender.config import RecommenderSettings
from agent.recommender.state import RecommenderState


def save(path: Path, state: RecommenderState) -> int:
    """Write the state; returns the bytes written."""
    data = json.dumps(state.to_dict(), separators=(",", ":")).encode()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, data)
    return len(data)


def load(path: Path, settings: RecommenderSettings) -> tuple[RecommenderState, str | None]:
    """(state, None), or (an empty state, the one warning to log) when the file is absent or unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return RecommenderState(settings), None
    except OSError as err:
        return RecommenderState(settings), f"cannot read {path}: {err.strerror}; starting with no history"
    try:
        return RecommenderState.from_dict(settings, json.loads(raw)), None
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as err:
        return RecommenderState(settings), f"{path} is not usable ({err}); starting with no history"
