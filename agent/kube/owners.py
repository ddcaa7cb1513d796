"""The owner chains of this node's pods, read on demand: a pod names its controller (a ReplicaSet, a Job),
and the controller's controller (the Deployment, the CronJob) is read from that object's metadata, one GET
per controller the first time a pod of it is on the node, kept while a pod of the node names it.

Why not a watch of every ReplicaSet: a cluster holds about ten ReplicaSets a Deployment (the revision
history), every node would receive all of them and each of their status changes, for the few whose pods
it runs. The link from a ReplicaSet to its Deployment does not change over the ReplicaSet's life (a
controller adopts an orphan only when the owner was deleted with orphaning, and then its pods are being
replaced too), so one read is enough; a link that could not be read is tried again at the next change of
the node's pods, or after RETRY_S.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from agent.core.model import PodView
from agent.infra.apiserver import METADATA, APIServer, path
from agent.infra.logging import get_logger
from agent.kube.errors import APIForbidden, APINotFound, wrap
from agent.pods.parse import controller_owner
from agent.vpa.source import MAX_CHAIN, OwnerKey, Owners

log = get_logger("agent.kube.owners")

# the controllers that are themselves controlled, and where their objects are read
READABLE: Final[Mapping[str, tuple[str, str]]] = {
    "ReplicaSet": ("apps/v1", "replicasets"),
    "Job": ("batch/v1", "jobs"),
}
RETRY_S: Final = 30.0


def first_links(pods: Iterable[PodView]) -> set[OwnerKey]:
    """The pods' own controllers that have a controller to read (pure)."""
    return {(p.namespace, *p.owner) for p in pods if p.owner is not None and p.owner[0] in READABLE}


class OwnerLinks:
    """(namespace, kind, name) -> its controller (kind, name), or None when it has none (or is gone)."""

    def __init__(self, api: APIServer, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.clock = clock
        self._links: dict[OwnerKey, tuple[str, str] | None] = {}
        self._failed_at: dict[OwnerKey, float] = {}
        self._forbidden_said = False
        self._lock = threading.Lock()
        self.reads = 0  # GETs made (for the tests and the logs)

    def owners(self) -> Owners:
        with self._lock:
            return {k: v for k, v in self._links.items() if v is not None}

    def update(self, pods: Iterable[PodView], force_retry: bool = False) -> bool:
        """Read the links the node's pods now need, forget those no pod needs; whether a link was learnt
        or forgotten."""
        wanted: set[OwnerKey] = set()
        frontier = first_links(pods)
        changed = False
        depth = 0
        while frontier and depth < MAX_CHAIN:
            wanted |= frontier
            nxt: set[OwnerKey] = set()
            for key in sorted(frontier):
                with self._lock:
                    known = key in self._links
                    parent = self._links.get(key)
                if not known and self._may_read(key, force_retry):
                    parent, read = self._read(key)
                    if read:
                        with self._lock:
                            self._links[key] = parent
                        self._failed_at.pop(key, None)
                        changed = changed or parent is not None
                if parent is not None and parent[0] in READABLE:
                    nxt.add((key[0], *parent))
            frontier = nxt - wanted
            depth += 1
        with self._lock:
            gone = [k for k in self._links if k not in wanted]
            for k in gone:
                del self._links[k]
        for k in [k for k in self._failed_at if k not in wanted]:
            del self._failed_at[k]
        return changed or bool(gone)

    def pending(self) -> bool:
        """Some link could not be read yet (it is tried again after RETRY_S)."""
        return bool(self._failed_at)

    def _may_read(self, key: OwnerKey, force: bool) -> bool:
        failed = self._failed_at.get(key)
        return force or failed is None or self.clock() - failed >= RETRY_S

    def _read(self, key: OwnerKey) -> tuple[tuple[str, str] | None, bool]:
        """(its controller, whether the answer is final)."""
        ns, kind, name = key
        api_version, resource = READABLE[kind]
        self.reads += 1
        try:
            obj: Any = self.api.get(path(api_version, resource, ns, name), timeout=(10, 30), accept=METADATA)
        except Exception as err:  # the client's and urllib3's errors: typed here
            e = wrap(f"get {kind} {ns}/{name}", err)
            if isinstance(e, APINotFound):
                return None, True  # gone: its pods are going too
            if isinstance(e, APIForbidden):
                if not self._forbidden_said:
                    self._forbidden_said = True
                    log.warning("owners.forbidden", kind=kind, error=str(e),
                                message=f"the agent may not read {resource}: pods of a {kind} are matched to its own VPAs only")
                return None, True
            self._failed_at[key] = self.clock()
            log.info("owners.read_failed", owner=f"{kind} {ns}/{name}", error=str(e), retry_in_s=RETRY_S)
            return None, False
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        return (controller_owner(meta) if isinstance(meta, Mapping) else None), True
