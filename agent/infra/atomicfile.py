"""Files that are either the old or the new version, never a torn one: temp file in the same directory,
written whole, fsync, rename over the target, then (unless the caller batches it) fsync of the directory
so the rename itself survives a crash. Owner-only modes: the agent's state is its own."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `path` with `data`. `sync_dir=False` when the caller fsyncs the directory once for a batch."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk is not made fuller by the attempts
        raise
    if sync_dir:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
