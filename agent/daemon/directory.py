"""Pods from a directory of manifests, for bare nodes without an API server (static-pod style).

Why polling: it works on every filesystem (including bind mounts and ConfigMap volumes, whose atomic
symlink swaps inotify misses), costs one stat per file per interval, and the interval is a setting.
A changed set of (name, mtime, size) reloads the whole directory and hands it over as a snapshot: the
daemon diffs it against what it knows, so added, edited and removed manifests all come out right.
A manifest that does not parse is reported once per change and the other pods still load.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.infra.logging import get_logger
from agent.kube.watch import PodSink
from agent.pods.load import MANIFEST_SUFFIXES, _documents, _items, split_limit_ranges
from agent.pods.parse import PodParseError
from agent.pods.sources.limitrange import LimitRanges

log = get_logger("agent.daemon.directory")

Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(directory: Path) -> Fingerprint:
    out: list[tuple[str, int, int]] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return ()
    for f in entries:
        if f.suffix not in MANIFEST_SUFFIXES:
            continue
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((f.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def read_manifests(directory: Path) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], list[str]]:
    """The raw pod objects of every manifest file (parsed by the daemon like API objects), the LimitRange
    objects among them, and problems."""
    objects: list[Mapping[str, Any]] = []
    problems: list[str] = []
    for name, _, _ in fingerprint(directory):
        path = directory / name
        try:
            text = path.read_text()
            for doc in _documents(text, str(path)):
                objects.extend(_items(doc, str(path)))
        except (OSError, UnicodeDecodeError) as err:
            problems.append(f"{path}: cannot read: {err}")
        except PodParseError as err:
            problems.append(f"{path}: {err.message}")
    pods, limit_ranges = split_limit_ranges(objects)
    return pods, limit_ranges, problems


class DirectorySource:
    """The manifests of a directory; its LimitRange manifests, when `limit_ranges` is given, bound the
    annotations as the API's would (read before the pods of the same reload are handed over)."""

    def __init__(self, directory: Path, interval_s: float, limit_ranges: LimitRanges | None = None) -> None:
        self.directory = directory
        self.interval_s = interval_s
        self.limit_ranges = limit_ranges

    def run(self, sink: PodSink, stop: threading.Event) -> None:
        seen: Fingerprint | None = None
        while not stop.is_set():
            current = fingerprint(self.directory)
            if current != seen:
                pods, limit_ranges, problems = read_manifests(self.directory)
                if self.limit_ranges is not None:
                    problems.extend(self.limit_ranges.replace_objects(limit_ranges)[1])
                for problem in problems:
                    log.warning("manifests.invalid", problem=problem)
                sink.snapshot(pods)
                log.info("manifests.loaded", directory=str(self.directory), pods=len(pods))
                seen = current
            stop.wait(self.interval_s)

    def interrupt(self) -> None:
        return None
