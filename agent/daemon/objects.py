"""A watch sink keeping the latest objects of one kind in memory, for the components' own watches."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any


class ObjectCache:
    """A watch sink keeping the latest object of each (namespace, name) and calling `changed` after each
    update (a relist replaces the whole set)."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self.items: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.changed = changed
        self.lock = threading.Lock()

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def snapshot(self, objs: list[Mapping[str, Any]]) -> None:
        with self.lock:
            self.items = {self._key(o): o for o in objs}
        self.changed()

    def upsert(self, obj: Mapping[str, Any]) -> None:
        with self.lock:
            self.items[self._key(obj)] = obj
        self.changed()

    def removed(self, uid: str, key: str) -> None:
        ns, _, name = key.partition("/")
        with self.lock:
            self.items.pop((ns, name), None)
        self.changed()

    def values(self) -> list[Mapping[str, Any]]:
        with self.lock:
            return list(self.items.values())
