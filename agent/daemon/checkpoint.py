"""The daemon's checkpoint in --state-dir: resize states and drift records, written atomically.

Why: a resize interrupted by SIGTERM (or a crash) must be known as in progress by the next start, so it
is completed and reported; and what the agent wrote must be remembered to tell someone else's revert
from a stale value. Temp file, fsync, rename, fsync of the directory, with a checksum; a missing or
corrupt file starts empty with a warning, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Final

from agent.errors import PermanentError

FILENAME: Final = "daemon-checkpoint.json"
VERSION: Final = 1


class CheckpointError(PermanentError, ValueError):
    pass


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load(state_dir: Path) -> tuple[dict[str, Any], str | None]:
    """(payload, warning). An absent file is an empty payload without a warning."""
    path = state_dir / FILENAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, None
    except OSError as err:
        return {}, f"cannot read the checkpoint {path}: {err.strerror}; starting without it"
    try:
        doc = json.loads(text)
        payload = doc["payload"]
        if doc.get("version") != VERSION or doc.get("sha256") != _digest(payload):
            raise CheckpointError("version or checksum mismatch")
        if not isinstance(payload, dict):
            raise CheckpointError("payload is not an object")
    except (ValueError, KeyError, TypeError) as err:
        return {}, f"the checkpoint {path} is corrupt ({err}); starting without it"
    return payload, None


def save(state_dir: Path, payload: dict[str, Any]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state_dir / FILENAME
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps({"version": VERSION, "sha256": _digest(payload), "payload": payload}, sort_keys=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)
    dfd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
