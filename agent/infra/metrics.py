"""Prometheus metrics and the /healthz, /readyz endpoints.

Why a registry of our own (not the client's global one): no module-level state, so tests can run
several daemons in one process and read each one's numbers. Both servers bind where the settings say,
127.0.0.1 unless configured, and serve from daemon threads that `Endpoints.close` stops.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from agent.infra.logging import get_logger

log = get_logger("agent.infra.metrics")

PREFIX: Final = "kube_cgroup_agent"
RESIZE_STATES: Final = ("Proposed", "InProgress", "Deferred", "Infeasible", "Done", "Error")


class BaseMetrics:
    """What every long-running command of the agent reports: errors, its watches' restarts, whether it is
    ready (as its /readyz says) and which build runs. `Watcher` needs only these."""

    def __init__(self, ready_name: str, ready_help: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.errors = Counter(
            f"{PREFIX}_errors_total",
            "Errors by class (the exception type or problem kind).",
            ["error_class"],
            registry=r,
        )
        self.watch_restarts = Counter(
            f"{PREFIX}_watch_restarts_total",
            "Watch restarts: gone (410, relist), error (backoff, resume), closed (resume).",
            ["reason"],
            registry=r,
        )
        self.ready = Gauge(f"{PREFIX}_{ready_name}", ready_help, registry=r)
        self.build_info = Gauge(
            f"{PREFIX}_build_info", "Always 1; the labels say which build runs.", ["version", "commit"], registry=r
        )

    def follow_readiness(self, ready: Callable[[], tuple[bool, str]]) -> None:
        """The ready gauge asks the same question as /readyz, at each scrape."""
        self.ready.set_function(lambda: 1.0 if ready()[0] else 0.0)

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data


class Metrics(BaseMetrics):
    """The node agent's (`run`)."""

    def __init__(self) -> None:
        super().__init__(
            "ready",
            "1 when the agent is ready (its first pod list is in and the tiers were reconciled), as /readyz says."
        )
        r = self.registry
        self.reconcile_seconds = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Time of one reconcile pass (one pod, or the QoS tiers).",
            ["scope"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.writes = Counter(
            f"{PREFIX}_writes_total", "cgroup file writes and CRI updates made.", ["kind"], registry=r
        )
        self.resize_state = Gauge(
            f"{PREFIX}_resize_state_pods", "Pods whose last resize is in each state.", ["state"], registry=r
        )
        for state in RESIZE_STATES:
            self.resize_state.labels(state).set(0)
        self.drift = Counter(
            f"{PREFIX}_drift_total",
            "Values found changed by someone else, by managed thing and what the agent did.",
            ["thing", "action"],
            registry=r,
        )
        self.yielded = Gauge(
            f"{PREFIX}_drift_yielded_values", "Values the agent stopped fighting over.", registry=r
        )
        self.pods = Gauge(f"{PREFIX}_pods", "Pods of this node the agent knows.", registry=r)
        self.vpa_enabled = Gauge(
            f"{PREFIX}_vpa_enabled",
            "1 when VPA-driven changes are on for this node; 0 when off (vpa.enabled, or the panic button label).",
            registry=r,
        )
        self.vpa_resizes = Counter(
            f"{PREFIX}_vpa_resizes_total", "VPA-driven resizes by outcome: sent (pods/resize), error, done (the agent's engine), infeasible, deferred.", ["outcome"], registry=r
        )
        self.history_loads = Counter(
            f"{PREFIX}_recommender_history_loads_total",
            "Loads of containers' history from Prometheus (recommender.prometheus), by outcome: loaded (answered; "
            "some containers may have had no series), failed (down, slow, refused, garbage, too large: one log line).",
            ["outcome"], registry=r,
        )
        self.history_containers = Counter(
            f"{PREFIX}_recommender_history_containers_total",
            "Containers whose history was asked of Prometheus, by outcome: found, missing (no series), failed.",
            ["outcome"], registry=r,
        )
        self.vpa_reactions = Counter(
            f"{PREFIX}_vpa_reactions_total",
            "Reactions in place (vpa.react) by what they did: cpu_raised, cpu_restored, cpu_at_cap, oom_bumped, oom_at_cap.",
            ["reaction"], registry=r,
        )
        self.rollout_pods = Counter(
            f"{PREFIX}_rollout_pods_total",
            "Pods of opted-in StatefulSets and DaemonSets updated by this node's agent, by how: in-place, recreated, failed.",
            ["how"],
            registry=r,
        )
        self.tier_shortfall = Gauge(
            f"{PREFIX}_tier_memory_shortfall_bytes",
            "A QoS tier's memory limit above what qos-reserved asks: the kernel would not lower it below "
            "usage, so it was set at the usage (0 once lowered).",
            ["cgroup"],
            registry=r,
        )
        self.status_reports = Counter(
            f"{PREFIX}_status_reports_total",
            "Events and pod condition patches sent, by outcome.",
            ["kind", "outcome"],
            registry=r,
        )

    def set_resize_states(self, counts: dict[str, int]) -> None:
        for state in RESIZE_STATES:
            self.resize_state.labels(state).set(counts.get(state, 0))


class KeeperMetrics(BaseMetrics):
    """The VPA admission keeper's (`vpa-admission`)."""

    def __init__(self) -> None:
        super().__init__(
            "vpa_admission_ready",
            "1 when the keeper is ready (the VPAs, LimitRanges and its parameter objects are known as they are "
            "now, and its first pass ran), as /readyz says."
        )
        r = self.registry
        self.passes = Counter(
            f"{PREFIX}_vpa_admission_passes_total",
            "Keeper passes by outcome: ok, failed (a write failed: tried again).",
            ["outcome"],
            registry=r,
        )
        self.writes = Counter(
            f"{PREFIX}_vpa_admission_writes_total",
            "VPAAdmissionParams objects written, by kind: applied, deleted.",
            ["kind"],
            registry=r,
        )
        self.workloads = Gauge(
            f"{PREFIX}_vpa_admission_workloads",
            "Workloads whose new pods the policy sets, as of the last pass.",
            registry=r,
        )
        self.skipped = Gauge(
            f"{PREFIX}_vpa_admission_skipped_vpas",
            "Opted-in VPAs whose new pods are left as they are (the reasons are in the objects), as of the last pass.",
            registry=r,
        )
        self.unreadable = Gauge(
            f"{PREFIX}_vpa_admission_unreadable_objects",
            "VPAs and LimitRanges that cannot be read, as of the last pass.",
            registry=r,
        )
        self.last_pass = Gauge(
            f"{PREFIX}_vpa_admission_last_pass_timestamp_seconds",
            "When the last pass ended (Unix time).",
            registry=r,
        )
        self.rollout_turns = Counter(
            f"{PREFIX}_rollout_turns_total",
            "DaemonSet rollout turns the keeper wrote on pods, by what: given, cleared (done or stale), taken_back "
            "(never begun in time: its node's agent is down), failed (the write failed: tried again).",
            ["what"],
            registry=r,
        )
        self.rollouts = Gauge(
            f"{PREFIX}_rollout_daemonsets_rolling",
            "DaemonSets that opt in and roll out now (their pods watched by the keeper), as of the last pass.",
            registry=r,
        )


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class Probe:
    """What /healthz and /readyz answer: (ok, one-line reason)."""

    healthy: Callable[[], tuple[bool, str]]
    ready: Callable[[], tuple[bool, str]]


class StartupProbe:
    """The probes from the process's first second, before the daemon they will ask exists.

    Why: the endpoints must answer while the agent still waits for its Node object or the LimitRanges:
    alive (an API server that answers slowly must not get the agent restarted by its liveness probe) and
    not ready, with what it waits for; `attach` hands both questions to the daemon once it is built."""

    def __init__(self, waiting: str = "starting") -> None:
        self._waiting = waiting
        self._probe: Probe | None = None

    def waiting(self, why: str) -> None:
        self._waiting = why

    def attach(self, probe: Probe) -> None:
        self._probe = probe

    def healthy(self) -> tuple[bool, str]:
        probe = self._probe
        return probe.healthy() if probe is not None else (True, f"starting: {self._waiting}")

    def ready(self) -> tuple[bool, str]:
        probe = self._probe
        return probe.ready() if probe is not None else (False, f"starting: {self._waiting}")

    def probe(self) -> Probe:
        return Probe(self.healthy, self.ready)


def _handler(routes: dict[str, Callable[[], tuple[int, str, bytes]]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                code, ctype, body = 404, "text/plain", b"not found\n"
            else:
                code, ctype, body = route()
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up (a probe's timeout): nothing to answer, nothing to report

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
            return  # probes every few seconds would drown the log

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-request (a probe's timeout) is one debug line, not a traceback on
        stderr among the daemon's JSON."""
        log.debug("http.client_error", client=str(client_address), error=repr(sys.exc_info()[1]))


def _probe(check: Callable[[], tuple[bool, str]]) -> Callable[[], tuple[int, str, bytes]]:
    def route() -> tuple[int, str, bytes]:
        ok, reason = check()
        return (200 if ok else 503), "text/plain", (reason + "\n").encode()

    return route


class Endpoints:
    """The metrics server and the health server (the same one when both addresses are equal)."""

    def __init__(self, metrics: BaseMetrics, probe: Probe, metrics_address: str, health_address: str) -> None:
        metrics_route: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, metrics.render())
        }
        health_routes = {"/healthz": _probe(probe.healthy), "/readyz": _probe(probe.ready)}
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        if metrics_address == health_address:
            self._serve(metrics_address, metrics_route | health_routes)
        else:
            self._serve(metrics_address, metrics_route)
            self._serve(health_address, health_routes)

    def _serve(self, address: str, routes: dict[str, Callable[[], tuple[int, str, bytes]]]) -> None:
        server = _Server(split_address(address), _handler(routes))
        thread = threading.Thread(target=server.serve_forever, name=f"http-{address}", daemon=True)
        thread.start()
        self._servers.append(server)
        self._threads.append(thread)

    @property
    def addresses(self) -> tuple[str, ...]:
        """host:port actually bound (port 0 in the settings picks a free one)."""
        return tuple(f"{s.server_address[0]!s}:{s.server_address[1]}" for s in self._servers)

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
