"""Parts of the daemon that run beside the pod loop (a VPA watcher, the local recommender, a rollout
coordinator): one small seam so that each plugs in with one factory and the loop does not know them.

A factory looks at the context (settings, the API client if any, ownership) and returns a component, or
None when its feature is off or cannot run here (it logs why). Before the daemon starts, a factory may add
sources of desired state (`context.sources`); once running, a component calls `context.refresh(uids)`
when its outside state changed so those pods are derived and reconciled again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.config.settings import Settings
from agent.core.model import PodView
from agent.core.ownership import Ownership
from agent.infra.metrics import Metrics
from agent.pods.sources import Source
from agent.pods.sources.limitrange import LimitRanges
from agent.resize.types import ResizeStatus


@dataclass(slots=True)
class DaemonContext:
    settings: Settings
    node: str | None  # None on a bare node without a name
    api: Any | None  # kubernetes.client.ApiClient; None when the pods come from a directory
    metrics: Metrics
    ownership: Ownership
    env: Any  # agent.pipeline.Environment (cgroup files and layout)
    cri: Any | None  # the CRI client, or None
    sources: list[Source] = field(default_factory=list)  # extra sources of desired state (add before start)
    # the namespaces' LimitRanges bounding the annotations (None: no annotation can be honoured here)
    limit_ranges: LimitRanges | None = None
    refresh: Callable[[Iterable[str] | None], None] = lambda uids: None  # set by the daemon
    pods: Callable[[], list[PodView]] = list  # the node's pods as last seen (set by the daemon)
    raw_pods: Callable[[], list[Any]] = list  # the same, as the API sent them
    # an Event on a pod: (uid, reason, message, warning); set by the daemon
    event: Callable[[str, str, str, bool], None] = lambda uid, reason, message, warning: None
    # an Event on any object (a workload): set by the daemon to its reporter
    event_on: Callable[[Any, str, str, bool], None] = lambda ref, reason, message, warning: None
    on_statuses: list[Callable[[Sequence[ResizeStatus]], None]] = field(default_factory=list)  # resize states that changed
    # the node's pods changed which namespaces, owners or labels they hold (a pod came, left, moved):
    # called from the pod watch's thread, so a hook only wakes its component (agent.daemon.scope)
    on_pods: list[Callable[[], None]] = field(default_factory=list)
    # the VPAs of this node's pods as the VPA component watches them; None when it does not run
    vpas: Callable[[], list[Mapping[str, Any]]] | None = None
    # an OOM kill the node saw: (pod key, container, the node recommender's new memory target or None)
    on_oom: list[Callable[[str, str, int | None], None]] = field(default_factory=list)


class Component(Protocol):
    name: str

    def start(self, stop: threading.Event) -> None:
        """Start its threads; return at once. It stops when `stop` is set."""
        ...

    def join(self, timeout_s: float) -> None:
        """Wait for its threads after `stop` was set (at shutdown)."""
        ...


ComponentFactory = Callable[[DaemonContext], Component | None]
