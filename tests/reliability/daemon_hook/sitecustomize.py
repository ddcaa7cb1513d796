"""Loaded into the daemon's process by the API campaign (PYTHONPATH=this directory), to see the cgroup
tree at every intermediate state the daemon itself makes: after each successful `os.write` to a file
below one of KCG_INVARIANT_DIRS (the test root's cpu and memory directories, `:`-separated), the limit
files below them are read and appended as one JSON line to KCG_INVARIANT_OUT. The campaign checks every
snapshot afterwards (tests/reliability/tree_invariant.py). Nothing here may change what the daemon does:
any error of the hook is swallowed, the write's result is returned as it was."""

from __future__ import annotations

import json
import os
import threading

_DIRS = tuple(d for d in os.environ.get("KCG_INVARIANT_DIRS", "").split(":") if d)
_OUT = os.environ.get("KCG_INVARIANT_OUT", "")
FILES = ("cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes")


def _read_all() -> dict[str, str]:
    found: dict[str, str] = {}
    for top in _DIRS:
        for here, _dirs, names in os.walk(top):
            for name in FILES:
                if name in names:
                    try:
                        with open(os.path.join(here, name)) as f:
                            found[os.path.join(here, name)] = f.read().strip()
                    except OSError:  # a cgroup removed meanwhile
                        pass
    return found


def _snapshot() -> dict[str, str] | None:
    """A state the tree really was in: files are read one by one while the test's runtime and kubelet may
    write, so a pass is kept only when the next pass reads the same (every file then held its value at
    the moment between the two passes); None when it never settles."""
    last = _read_all()
    for _ in range(20):
        again = _read_all()
        if again == last:
            return again
        last = again
    return None


def _install() -> None:
    real_write = os.write
    lock = threading.Lock()
    out = open(_OUT, "a", buffering=1)  # noqa: SIM115 (open for the process's life)

    def write(fd: int, data: bytes, /) -> int:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if not any(path.startswith(d + "/") for d in _DIRS):
            return real_write(fd, data)
        with lock:  # the daemon's own writes one at a time, each followed by its snapshot
            n = real_write(fd, data)
            try:
                line = {"after": path, "value": bytes(data).decode(errors="replace"), "files": _snapshot()}
                out.write(json.dumps(line) + "\n")
            except Exception:  # the hook must never change the daemon's behaviour
                pass
            return n

    os.write = write


if _DIRS and _OUT:
    _install()
