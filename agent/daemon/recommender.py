"""The recommender beside the daemon's pod loop: a thread that samples the node every `sampleInterval`
(one read pass), feeds the histories, saves them every minute (and at stop), and reacts to an OOM kill at
once (a log line, a metric, and the `on_oom` hooks — the VPA actuator's way in). With a Prometheus
configured, a container (or a pod level) it has no history of gets its history from there first
(agent.recommender.history)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.core.model import POD
from agent.daemon.components import Component, DaemonContext
from agent.infra.logging import get_logger
from agent.recommender.estimate import recommend
from agent.recommender.history import HistoryLoader, loader_for
from agent.recommender.podlevel import PodCaps
from agent.recommender.publish import Publisher
from agent.recommender.sampler import Sampler, Target, reader_for, targets
from agent.recommender.state import RecommenderState
from agent.recommender.store import load, save
from agent.vpa.model import PodScalingMode
from agent.vpa.parse import parse_vpa

log = get_logger("agent.recommender")
SAVE_EVERY_S = 60.0


@dataclass(slots=True)
class RecommenderComponent:
    context: DaemonContext
    state: RecommenderState
    sampler: Sampler
    path: Path
    clock: Callable[[], float] = time.time
    on_oom: list[Callable[[Target], None]] = field(default_factory=list)
    publisher: Publisher | None = None  # with an API: the VPAs that name this recommender
    history: HistoryLoader | None = None  # with recommender.prometheus.address: new containers' history
    name: str = "recommender"
    _thread: threading.Thread | None = None

    def tick(self) -> int:
        now = self.clock()
        settings = self.context.settings
        wanted = targets(self.context.pods(), settings.cgroup_root_name, settings.cgroup_driver, self.context.env.hierarchy)
        samples, oomed = self.sampler.tick(now, wanted)
        if self.history is not None:  # a container or pod level never seen waits for its history from Prometheus
            self.history.feed(self.state, [(t.pod, t.container) for t in wanted], samples, now)
        else:
            for s in samples:
                self.state.observe(s)
        log.debug("recommender.tick", containers=len(wanted), samples=len(samples))
        for t in oomed:
            if t.container == POD:  # an OOM sample of the pod level; the kill is its container's to react to
                log.info("recommender.pod_oom", pod=t.pod)
                continue
            log.warning("recommender.oom", pod=t.pod, container=t.container, reacted=settings.recommender.react_to_oom)
            self.context.metrics.errors.labels("ContainerOOMKilled").inc()
            if settings.recommender.react_to_oom:
                for hook in self.on_oom:
                    hook(t)
                memory = self._memory_target(t)
                for oom_hook in self.context.on_oom:  # the VPA actuator: act on it now
                    oom_hook(t.pod, t.container, memory)
        return len(samples)

    def _memory_target(self, t: Target) -> int | None:
        """This container's memory target after the OOM bump, as the recommender now estimates it."""
        history = self.state.histories.get((t.pod, t.container))
        if history is None or history.memory.is_empty():
            return None
        return recommend(history, self.context.settings.recommender, self.state.containers_in(t.pod)).target.memory

    def _loop(self, stop: threading.Event) -> None:
        interval = self.context.settings.recommender.sample_interval_s
        publish_every = self.context.settings.recommender.recommender_interval_s
        last_save = last_publish = time.monotonic()
        while not stop.wait(interval):
            try:
                self.tick()
            except Exception as err:  # a bad tick must not end the sampler: log it, go on
                log.warning("recommender.tick_failed", error=f"{type(err).__name__}: {err}")
            if self.publisher is not None and time.monotonic() - last_publish >= publish_every:
                last_publish = time.monotonic()
                try:
                    for vpa in self.publisher.step():
                        log.info("recommender.published", vpa=vpa)
                except Exception as err:  # the API may be down: the partials go out at the next interval
                    log.warning("recommender.publish_failed", error=f"{type(err).__name__}: {err}")
            if time.monotonic() - last_save >= SAVE_EVERY_S:
                self.persist()
                last_save = time.monotonic()
        self.persist()
        self.sampler.close()
        if self.history is not None:
            self.history.close()
        self._release()

    def _release(self) -> None:
        """At shutdown: the Leases of the VPAs this node publishes go to the other nodes now."""
        if self.publisher is None:
            return
        try:
            released = self.publisher.release_all()
        except Exception as err:  # the API may be gone too: the Leases then expire
            log.warning("recommender.release_failed", error=f"{type(err).__name__}: {err}")
            return
        if released:
            log.info("recommender.released", leases=released)

    def persist(self) -> None:
        self.state.forget_older_than(self.clock())
        try:
            size = save(self.path, self.state)
        except OSError as err:
            log.warning("recommender.save_failed", path=str(self.path), error=err.strerror)
            return
        n = len(self.state.histories)
        log.debug("recommender.saved", containers=n, bytes=size, bytes_per_container=size // n if n else 0)

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._loop, args=(stop,), name="recommender", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)


def _count_load(context: DaemonContext, outcome: str, found: int, asked: int) -> None:
    metrics = context.metrics
    metrics.history_loads.labels(outcome).inc()
    if outcome == "failed":
        metrics.history_containers.labels("failed").inc(asked)
        return
    metrics.history_containers.labels("found").inc(found)
    metrics.history_containers.labels("missing").inc(asked - found)


def pod_caps(vpa: Mapping[str, Any]) -> PodCaps | None:
    """The VPA's podPolicy (the field, else its annotation: agent.vpa.parse) as the recommender caps the pod
    level with it; None when not stated. A VPA that cannot be read raises VPAParseError (a ValueError)."""
    policy = parse_vpa(vpa).pod_policy
    if policy is None:
        return None
    return PodCaps(policy.mode == PodScalingMode.OFF, policy.min_allowed, policy.max_allowed, policy.controlled)


def recommender_component(context: DaemonContext) -> Component | None:
    settings = context.settings
    if not settings.recommender.enabled:
        return None
    path = settings.state_dir / settings.recommender.state_file
    state, warning = load(path, settings.recommender)
    if warning:
        log.warning("recommender.state", message=warning)
    reader = reader_for(settings.cgroupfs, settings.cgroup_root_name, settings.cgroup_driver, context.env.hierarchy)
    sampler = Sampler(reader, settings.recommender.cpu_starvation,
                      settings.recommender.throttle_threshold)
    publisher = None
    if context.api is not None and context.node:
        # the pods as the daemon sees them at each step: the daemon sets context.pods after this is built
        from agent.infra.apiserver import APIServer
        from agent.kube.node_vpas import NodeVPAs

        # the VPAs of the node's pods: the VPA component's watch when it runs (it is made after this one),
        # else one list a step narrowed by their target label
        read = NodeVPAs(APIServer(context.api), lambda: context.pods())
        publisher = Publisher(context.api, context.node, state, lambda: context.pods(),
                              lambda: (context.vpas or read)(), pod_policy=pod_caps)
    history = loader_for(settings.recommender)
    if history is not None:
        history.on_load = lambda outcome, found, asked: _count_load(context, outcome, found, asked)
        log.info("recommender.prometheus", address=history.prom.address,
                 history_length_s=history.prom.history_length_s, resolution_s=history.prom.history_resolution_s)
    return RecommenderComponent(context, state, sampler, path, publisher=publisher, history=history)
