"""`kube-cgroup-agent run`: wire the daemon from the settings, run it until SIGTERM, exit 0.

Two sources: the Kubernetes API (the node's pods, list+watch; Events and the pod condition as
reports), or, with `pods` set to a directory, manifests on a bare node (reports go to the log).
Everything is checked before anything starts, and every problem is reported at once.

Signals: SIGTERM (and SIGINT) stop it: the current steps finish, the state is flushed, exit 0. SIGHUP
(`systemctl reload`) reads the configuration again, as the command line read it: a configuration that
is not valid, or with which the daemon could not start, is refused in one log line and the daemon goes
on with the settings it has; the same settings change nothing; new ones are applied by stopping as at
SIGTERM and executing the same command line again in the same process (same PID, so systemd's main
process stays; `RELOADING=1` before, the new process's `READY=1` after its first pass). Why a re-exec
rather than rebuilding the daemon in place: every setting is read once at start by some part (the
sources, the components, the endpoints' ports, logging, the API client), and a fresh start from the
flushed state is the path every restart already takes and the tests cover; rebuilding in place would
be a second way to start, with the old threads and module state still around. Under systemd the loop
also speaks its notification protocol (agent.daemon.supervisor).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

from agent import pipeline
from agent.config.settings import ConfigError, Settings
from agent.core.compute import NodeComputation
from agent.core.ownership import Ownership, Thing, resolve
from agent.daemon.components import ComponentFactory, DaemonContext
from agent.daemon.core import Daemon, PodSource
from agent.daemon.reconciler import Reconciler
from agent.daemon.reload import Ending, Reloader, Reloads, Verdict, exec_self, judge, reexec_now
from agent.daemon.supervisor import TICK_S, Supervisor
from agent.infra.logging import configure, get_logger
from agent.infra.metrics import Endpoints, Metrics, Probe, StartupProbe
from agent.infra.sdnotify import Notifier
from agent.kube.status import StatusReporter
from agent.pipeline.execute import CgroupStepRunner, ContainerUpdater
from agent.pods.sources import default_sources
from agent.pods.sources.limitrange import LimitRanges
from cgroupfs.types import DriverKind

log = get_logger("agent.daemon")

__all__ = ["Daemon", "Reloader", "check_settings", "run", "select_reconciler"]


API_CONNECTIONS = 32


def factories() -> list[ComponentFactory]:
    """Every component the daemon runs beside the pod loop, in start order; each decides from the
    settings whether it runs (agent.daemon.components)."""
    from agent.daemon.limitranges import limitrange_component
    from agent.daemon.optin import optin_component
    from agent.daemon.recommender import recommender_component
    from agent.daemon.rollout import rollout_component
    from agent.daemon.vpa import vpa_component

    return [limitrange_component, recommender_component, vpa_component, rollout_component, optin_component]


def check_settings(settings: Settings) -> list[str]:
    """What stops the daemon from starting, one line per problem (the settings are valid on their own)."""
    problems: list[str] = []
    if settings.pods is None:
        if not (settings.node_name or os.environ.get("NODE_NAME")):
            problems.append("nodeName (or --node, or NODE_NAME) is needed to watch this node's pods")
    elif settings.pods == "-" or not Path(settings.pods).is_dir():
        problems.append(f"pods {settings.pods!r}: the daemon watches a directory of manifests")
    if not settings.cgroupfs.is_dir():
        problems.append(f"cgroupfs {settings.cgroupfs} is not a directory")
    try:
        # the state (allocations, resize states, histories) is the agent's alone: owner-only
        settings.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if settings.state_dir.stat().st_mode & 0o077:
            settings.state_dir.chmod(0o700)
        if not os.access(settings.state_dir, os.W_OK):
            problems.append(f"stateDir {settings.state_dir} is not writable")
    except OSError as err:
        problems.append(f"stateDir {settings.state_dir}: {err.strerror}")
    return problems


def _cri(settings: Settings) -> ContainerUpdater | None:
    if not settings.cri_endpoint:
        return None
    from agent.cri.client import CRIClient
    from agent.cri.errors import CRIError

    client = CRIClient(settings.cri_endpoint)
    try:  # connected now, as the kubelet does at start: the first resize does not pay the connection
        v = client.version()
        log.info("runtime", endpoint=settings.cri_endpoint, name=v.runtime_name, version=v.runtime_version)
    except CRIError as err:  # the runtime may come later: every call retries on its own
        log.warning("runtime.unavailable", endpoint=settings.cri_endpoint, error=str(err))
    updater: ContainerUpdater = client
    return updater


def reload_verdict(current: Settings, load: Callable[[], Settings]) -> Verdict:
    """Read the settings again and judge them (agent.daemon.reload.judge) with this daemon's checks."""
    return judge(current, load, check_settings)


def _wait_for_node(server: Any, node: str, settings: Settings, wait: Callable[[float], bool]) -> Any:
    from agent.infra.queue import Backoff
    from agent.kube.errors import APIError
    from agent.kube.node import node_info, read_node

    backoff = Backoff(base=1.0, cap=30.0)
    while True:
        try:
            return node_info(read_node(server, node), settings)
        except APIError as err:
            delay = backoff.next("node")
            log.warning("node.unavailable", node=node, error=str(err), retry_in_s=delay)
            if wait(delay):
                return None


def select_reconciler(
    settings: Settings, env: pipeline.Environment, ownership: Ownership, cri: ContainerUpdater | None
) -> Reconciler:
    """The one reconciler, on every node: the resize engine (admission, Deferred/Infeasible,
    RestartContainer, the per-pod state store) behind the ownership table and the drift gate. On a node
    whose kubelet resizes containers, the same code runs with the kubelet's things observed, never
    written: no CRI calls, the kubelet's allocation followed (`ContainerStatus.allocatedResources`)."""
    from agent.daemon.drift import DriftTracker
    from agent.daemon.engine_reconciler import EngineReconciler
    from agent.daemon.gate import Gate
    from agent.resize.engine import ResizeEngine

    if "reconciler" in settings.explicit:
        log.warning(
            "config.deprecated",
            key="reconciler",
            value=settings.reconciler,
            message="reconciler: is deprecated and ignored: one reconciler runs on every node; "
            "remove the key (it will be refused in the next release)",
        )
    gate = Gate(
        ownership,
        DriftTracker(settings.drift_max_reverts, settings.drift_backoff_s),
        settings.cgroup_driver is DriverKind.SYSTEMD,
        qos_reserved_memory_percent=settings.qos_reserved_memory_percent,
    )
    containers_mine = ownership.writes(Thing.CONTAINER_RESIZES)
    engine = ResizeEngine(
        settings,
        env,
        cri if containers_mine else None,
        runner_for=_systemd_runners(settings, env),
        kubelet_admits=not containers_mine,
    )
    log.info("reconciler", containers="agent" if containers_mine else ownership.owner(Thing.CONTAINER_RESIZES).value)
    return EngineReconciler(engine, observe_only=settings.observe_only, gate=gate)


def _systemd_runners(
    settings: Settings, env: pipeline.Environment
) -> Callable[[NodeComputation], CgroupStepRunner] | None:
    """Under the systemd driver, pod and tier values go through unit properties first (as `apply` does),
    or systemd puts its own back on the next daemon-reload."""
    if settings.cgroup_driver is not DriverKind.SYSTEMD:
        return None
    from agent.pipeline.systemd import systemd_runner
    from cgroupfs.systemd.bus import SystemdBus
    from cgroupfs.systemd.driver import SystemdUnits

    units = SystemdUnits(SystemdBus())

    def runner_for(comp: NodeComputation) -> CgroupStepRunner:
        desired = {t.cgroup: t.values for t in comp.tiers} | {p.cgroup: p.values for p in comp.pods}
        return systemd_runner(units, env.files, settings.cpu_weight_formula.value, desired)

    return runner_for


def _log_ownership(ownership: Ownership) -> None:
    for thing in Thing:
        log.info(
            "ownership", thing=thing.value, owner=ownership.owner(thing).value, why=ownership.reasons[thing]
        )


def run(
    settings: Settings,
    reloader: Reloader | None = None,
    *,
    notifier: Notifier | None = None,
    reexec: Callable[[], None] = exec_self,
) -> int:
    """The daemon until SIGTERM (0), or a reload whose exec failed (1). `reloader`: how SIGHUP reads the
    settings again (none: SIGHUP is logged and ignored); `notifier`: systemd's (from the environment)."""
    configure(settings.log_format, settings.log_level)
    # a fatal signal (systemd's watchdog sends SIGABRT) shows where every thread was, on stderr
    faulthandler.enable()
    problems = check_settings(settings)
    if problems:
        raise ConfigError(problems)
    notifier = notifier or Notifier.from_environ()
    from agent.daemon.heap import fewer_arenas

    if not fewer_arenas():  # before any thread: fewer malloc arenas, less memory held (heap.fewer_arenas)
        log.info("malloc.arenas", message="the C library's malloc arenas could not be capped (no glibc mallopt)")
    stop = threading.Event()
    for key, src in sorted(settings.inherited.items()):
        log.info("kubelet_config.inherited", key=key, source=src)
    for conflict in settings.kubelet_conflicts:  # once, at start
        log.warning("kubelet_config.conflict", message=conflict)

    reload_requested = threading.Event()
    terminated = threading.Event()  # SIGTERM or SIGINT: `stop` alone is also set by a reload's shutdown

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal", signal=signal.Signals(signum).name)
        terminated.set()
        stop.set()

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        log.info("signal", signal=signal.Signals(signum).name)
        reload_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)

    env = pipeline.environment(settings)
    if settings.create_qos_cgroups:  # a bare node: whichever reconciler runs, the tiers must exist first
        from agent.pipeline.apply import ensure_tiers

        ensure_tiers(env)
    metrics = Metrics()
    # the endpoints answer from the first second: alive, and not ready until the first pass (StartupProbe)
    probe = StartupProbe("reading the node's configuration")
    metrics.follow_readiness(probe.ready)
    supervisor = Supervisor(notifier, probe.probe())
    supervisor.ping()  # started by a reload: the watchdog is running (systemd arms it only after READY)
    from agent.infra.version import commit, version

    metrics.build_info.labels(version(), commit()).set(1)
    endpoints = Endpoints(metrics, probe.probe(), settings.metrics_bind_address, settings.health_bind_address)
    log.info("listening", endpoints=list(endpoints.addresses))
    reloads = Reloads(reload_requested, reloader, settings, check_settings)
    try:
        ending = _serve(settings, env, metrics, probe, endpoints, stop, supervisor, reloads)
    finally:
        endpoints.close()
    if ending is Ending.RELOAD and not terminated.is_set():  # SIGTERM during a reload's shutdown: exit
        return reexec_now(supervisor, reexec)
    supervisor.stopping()
    notifier.close()
    return 0


def _serve(
    settings: Settings,
    env: pipeline.Environment,
    metrics: Metrics,
    probe: StartupProbe,
    endpoints: Endpoints,
    stop: threading.Event,
    supervisor: Supervisor,
    reloads: Reloads,
) -> Ending:
    """The daemon's life once its endpoints answer: the node, the sources, the loop until SIGTERM or a
    reload with new settings."""
    node = settings.node_name or os.environ.get("NODE_NAME")
    # the namespaces' LimitRanges bound the annotations wherever one can be honoured (annotationNamespaces
    # not []): from the API (agent.daemon.limitranges) or the manifest directory; and, VPA in place on, their
    # type Pod caps what VPA gives a pod-level pod in any namespace (read only where such a pod runs)
    vpa_reads = settings.vpa.enabled and settings.pods is None
    limit_ranges = (LimitRanges.unknown(None if vpa_reads else settings.annotation_namespaces)
                    if settings.annotation_namespaces != frozenset() or vpa_reads else None)
    source: PodSource
    reporter: StatusReporter
    api: Any | None = None
    if settings.pods is not None:
        from agent.daemon.directory import DirectorySource
        from agent.kube.status import LogStatusReporter

        source = DirectorySource(Path(settings.pods), settings.pods_poll_interval_s, limit_ranges)
        reporter = LogStatusReporter()
        kubelet_version = settings.kubelet_version
        log.info("source", kind="directory", directory=settings.pods)
    else:
        assert node is not None
        # one connection per watch: the pod watch, the node's, one per workload and namespace the node's
        # pods need (agent.daemon.scope), and the writes; a pool smaller than that discards connections
        from agent.infra.apiserver import APIServer, limit
        from agent.infra.ratelimit import TokenBucket
        from agent.kube.client import api_client
        from agent.kube.status import APIStatusReporter
        from agent.kube.watch import PodWatcher

        api = limit(api_client(settings.kubeconfig, connections=API_CONNECTIONS), TokenBucket(settings.api_qps, settings.api_burst))
        server = APIServer(api)
        probe.waiting(f"waiting for node {node} from the API server")
        info = _wait_for_node(server, node, settings, lambda delay: supervisor.wait(stop, delay))
        if info is None:
            return Ending.STOPPED
        settings = replace(settings, allocatable=info.allocatable, kubepods_size=info.kubepods)
        kubelet_version = info.kubelet_version
        log.info(
            "node",
            node=node,
            kubelet=kubelet_version,
            allocatable_from=info.allocatable_source,
            cpu_milli=info.allocatable.cpu_milli if info.allocatable else None,
            memory=info.allocatable.memory if info.allocatable else None,
        )
        source = PodWatcher(server, node, metrics)
        reporter = APIStatusReporter(server, node, metrics)
        if settings.annotation_namespaces is None:
            # whoever may update a pod's metadata may then change its limits past admission (SECURITY.md)
            log.warning(
                "annotations.every_namespace",
                message="annotationNamespaces is unset: the resize and pod-level annotations are honoured in "
                "every namespace; list the namespaces allowed to use them ([] for none)",
            )

    ownership = resolve(settings.ownership, kubelet_version, settings.feature_gates, settings.observe_only)
    _log_ownership(ownership)
    cri = _cri(settings)
    if cri is None and ownership.writes(Thing.CONTAINER_RESIZES):
        log.warning(
            "cri.none", message="no criEndpoint: container values that differ are left to the runtime"
        )
    reconciler = select_reconciler(settings, env, ownership, cri)
    context = DaemonContext(settings, node, api, metrics, ownership, env, cri, limit_ranges=limit_ranges)
    components = [c for factory in factories() if (c := factory(context)) is not None]
    daemon = Daemon(
        reconciler,
        source,
        reporter,
        metrics,
        node=node,
        resync_period_s=settings.resync_period_s,
        workers=settings.workers,
        stop=stop,
        sources=(*default_sources(settings.annotation_namespaces, limit_ranges), *context.sources),
        keep_raw=bool(components),  # only components refresh pods or read their objects
    )
    if limit_ranges is not None:
        from agent.daemon.limitranges import LimitRangeComponent, wait_settled

        bounds = next((c for c in components if isinstance(c, LimitRangeComponent)), None)
        daemon.before_first_pass.append(bounds.wait_first if bounds is not None else wait_settled(limit_ranges))
    context.refresh = daemon.refresh
    context.pods = daemon.views
    context.raw_pods = daemon.raws
    context.event = daemon.event
    context.event_on = reporter.event
    daemon.status_hooks = context.on_statuses
    daemon.membership_hooks = context.on_pods
    probe.attach(Probe(daemon.healthy, daemon.ready))
    supervisor.pods = daemon.pod_count
    log.info(
        "started",
        endpoints=list(endpoints.addresses),
        observe_only=settings.observe_only,
        resync_period_s=settings.resync_period_s,
        state_dir=str(settings.state_dir),
    )
    daemon.start()
    for component in components:
        component.start(stop)
        log.info("component.started", component=component.name)
    ending = Ending.STOPPED
    while not supervisor.wait(stop, TICK_S):
        if reloads.wanted(supervisor):
            ending = Ending.RELOAD
            supervisor.reloading()
            break
    if ending is Ending.STOPPED:
        supervisor.stopping()
    # a reload stops as SIGTERM does: the current steps finish, the state is flushed, reports are sent
    log.info("stopping", reason=ending.value)
    daemon.shutdown()
    for component in components:
        component.join(10.0)
    log.info("stopped", reason=ending.value)
    return ending
