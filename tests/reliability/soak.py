"""Soak: the real daemon (`kube-cgroup-agent run`, a subprocess) under a steady stream of pod events with
faults injected, watched from outside for leaks, lost resizes and latency drift.

Why from outside: a leak or a slow drift shows only in the process as it runs for minutes, and a lost
resize only in the files the node ends with. The node is the daemon tests' (tests/daemon/harness.py): a
fake API server speaking HTTP to the real client, a strict fake cgroup v1 tree, the fake CRI server, and
ResizeNode playing the kubelet (pod and container cgroups, containers) and runc (every runtime update
mirrored into the tree, and the pod it touched checked child <= parent right after).

One run: `pods` pods (Guaranteed, Burstable, BestEffort; one to three containers) are created and
published, the daemon starts and converges; then `events` pod events go out at an even rate over
`duration_s` (mostly resizes, some deletes and re-creates around `pods`, status-only updates) while
faults are injected at a steady rate (API 500/429, dropped watches, 410 Gone, CRI errors). Every
`probe_every`-th resize is timed from `cluster.apply` to the node's files showing it. Then the faults
stop, the node converges, and every live pod's files are compared with its spec. The daemon's RSS,
file descriptors, threads and children are sampled throughout; "first" and "last" figures are over the
first and last tenth of the event phase (the first and last minute of a 10-minute run).
The tests/reliability runner calls `run_soak` in a full form and a short CI form (same code path).
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.stats import percentile
from tests.daemon.harness import Daemon, Env, api_pod, serving, wait_for
from tests.resize.harness import ResizeNode
from tests.resize.kubelet import kubelet_files, kubelet_mismatches
from tests.resize.manifests import ctr, manifest
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.servicer import RUNC_WRAP
from tests.support.fake_cri.serving import FakeCRI, running_fake_cri
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.node import node_object

MIB = 1 << 20
# big enough that no resize is ever Deferred for want of room (the soak is about leaks, not admission)
NODE_CPU, NODE_MEMORY = "256", "1Ti"
CPU_MILLI = tuple(range(20, 201, 10))
MEMORY_MI = tuple(range(32, 257, 16))
UPDATE = "UpdateContainerResources"


# ---- figures ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles of one window, in milliseconds (None when the window has no sample)."""

    n: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of(cls, ms: Sequence[float]) -> Percentiles:
        if not ms:
            return cls(0, None, None, None, None)
        return cls(len(ms), *(round(percentile(ms, q), 2) for q in (50, 95, 99, 100)))


@dataclass(frozen=True)
class Windows:
    """The same latency over the first and the last tenth of the event phase, and the median and p99 of
    every tenth (to tell a drift from a noisy window)."""

    first: Percentiles
    last: Percentiles
    p50_by_tenth_ms: tuple[float | None, ...]
    p99_by_tenth_ms: tuple[float | None, ...]

    @classmethod
    def of(cls, timed: Sequence[tuple[float, float]], duration_s: float) -> Windows:
        """`timed`: (seconds into the event phase, latency in ms); a time past the end counts in the last."""
        window = duration_s / 10
        tenths = [
            Percentiles.of([ms for t, ms in timed if t >= 0 and min(int(t / window), 9) == i]) for i in range(10)
        ]
        return cls(tenths[0], tenths[-1], tuple(p.p50_ms for p in tenths), tuple(p.p99_ms for p in tenths))


@dataclass(frozen=True)
class Sample:
    """The daemon process at one instant (psutil), and whether /healthz answered 200."""

    t_s: float  # seconds into the event phase (negative: before it, from the daemon's start)
    rss_bytes: int
    fds: int
    threads: int
    children: int
    cpu_s: float
    healthy: bool


@dataclass(frozen=True)
class SoakResult:
    """Every figure of one run; `to_json` for the runner's report."""

    pods: int
    events: int
    duration_s: float
    seed: int
    faults: bool
    # what was sent
    events_sent: int
    events_by_kind: Mapping[str, int]
    send_lag_max_s: float  # how late against its schedule the latest event went out
    faults_injected: int
    faults_by_kind: Mapping[str, int]
    faults_unconsumed: int  # armed but never hit (a list fault with no relist after it)
    # correctness, once the faults stopped and the node converged
    pods_checked: int
    containers_checked: int
    resizes_checked: int  # live pods resized during the run, their latest resize compared with the files
    resizes_lost: int  # live pods whose files still differ from their spec
    lost_samples: tuple[str, ...]
    probes: int
    probes_unresolved: int
    violations: int
    violation_samples: tuple[str, ...]
    crashes: int  # "reconcile.crashed" lines
    raw_lines: int  # log lines that are not JSON (a traceback)
    healthz_failures: int  # samples where /healthz did not answer 200
    healthz_end: int
    exit_code: int | None
    # the daemon process: first and last tenth of the event phase
    window_s: float
    rss_first_mib: float
    rss_last_mib: float
    rss_max_mib: float
    rss_growth_pct: float
    fds_first: int
    fds_last: int
    threads_first: int
    threads_last: int
    children_first: int
    children_last: int
    cpu_percent: float  # the daemon's CPU over the event phase, % of one core
    harness_cpu_percent: float  # this process's (API server, CRI server, kubelet's part, probes), same span
    # latency
    apply_latency: Windows  # cluster.apply -> the node's files show the spec (probed resizes)
    reconcile_pod: Windows  # the daemon's own "reconcile" duration_ms, pod passes
    reconcile_tiers: Windows  # the same, tier passes
    # time
    startup_s: float  # daemon start -> every pod's files at its spec
    converge_s: float  # faults stopped -> every live pod's files at its spec
    wall_s: float
    samples: tuple[Sample, ...] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["events_by_kind"] = dict(self.events_by_kind)
        out["faults_by_kind"] = dict(self.faults_by_kind)
        return out


# ---- the population --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """How a pod's containers are resourced; a resize keeps each container's style, so its QoS class."""

    styles: tuple[str, ...]  # per container c0, c1...: guaranteed | burstable | requests | none

    @property
    def resizable(self) -> bool:
        return "none" not in self.styles


def _shape(rng: random.Random) -> Shape:
    n = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
    qos = rng.choices(("guaranteed", "burstable", "besteffort"), weights=(4, 4, 2))[0]
    if qos == "guaranteed":
        return Shape(("guaranteed",) * n)
    if qos == "besteffort":
        return Shape(("none",) * n)
    return Shape(tuple(rng.choice(("burstable", "requests")) for _ in range(n)))


def _resources(rng: random.Random, style: str, avoid_cpu: int | None = None) -> dict[str, Any]:
    """A container's resources in its style; the CPU request differs from `avoid_cpu`, so every resize
    moves a kernel value (cpu.shares at least) that the probe can see."""
    cpu = rng.choice([c for c in CPU_MILLI if c != avoid_cpu])
    mem = rng.choice(MEMORY_MI)
    asked = {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}
    if style == "guaranteed":
        return {"limits": asked}
    if style == "requests":
        return {"requests": asked}
    if style == "burstable":
        limit = {"cpu": f"{cpu + rng.choice((50, 100, 200))}m", "memory": f"{mem + rng.choice((0, 32, 64))}Mi"}
        return {"requests": asked, "limits": limit}
    return {}


def _cpu_request(resources: Mapping[str, Any]) -> int | None:
    asked = resources.get("requests") or resources.get("limits") or {}
    text = asked.get("cpu")
    return int(text.removesuffix("m")) if isinstance(text, str) else None


# ---- probes and samples (each on a thread of its own) ------------------------------------------------


class Prober:
    """Times resizes from their apply to the node's files showing the new spec (polled every 2 ms)."""

    def __init__(self, node: ResizeNode, on_applied: Callable[[str, float], None] | None = None) -> None:
        self.node = node
        self.on_applied = on_applied  # (pod, ms), on the prober's thread
        # pod -> (seconds into the phase, monotonic start, the files it waits for: path -> text)
        self.pending: dict[str, tuple[float, float, dict[str, str]]] = {}
        self.timed: list[tuple[float, float]] = []  # (seconds into the phase, ms)
        self.count = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="soak-prober", daemon=True)
        self._thread.start()

    def busy(self, pod: str) -> bool:
        with self._cond:
            return pod in self.pending

    @contextmanager
    def timing(self, pod: str, t_s: float) -> Iterator[None]:
        """Start the clock right before the block (the apply), then poll for the change on the thread.
        The wanted files are computed once, here, and a poll stops at the first file not there yet: a
        poll that computes, or reads everything, starves this process (the fake API and CRI servers with
        it) once a few dozen probes are pending, and the daemon's latency grows with it."""
        wanted = kubelet_files(self.node, pod)
        started = time.monotonic()
        yield
        with self._cond:
            self.pending[pod] = (t_s, started, wanted)
            self.count += 1
            self._cond.notify()

    def _applied(self, wanted: dict[str, str]) -> bool:
        """Read up to the first file not there yet (usually one read per pending probe and poll)."""
        try:
            return all(self.node.read(path) == text for path, text in wanted.items())
        except OSError:
            return False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self.pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                items = list(self.pending.items())
            for pod, (t_s, started, wanted) in items:
                if self._applied(wanted):
                    elapsed_ms = (time.monotonic() - started) * 1000
                    with self._cond:
                        del self.pending[pod]
                        self.timed.append((t_s, elapsed_ms))
                    if self.on_applied is not None:
                        self.on_applied(pod, elapsed_ms)
            time.sleep(0.002)

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> int:
        """Stop polling (again: a no-op); returns how many probes never saw their change."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=10)
        return len(self.pending)


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


class Sampler:
    """The daemon's RSS, descriptors, threads, children and CPU time, and /healthz, every `every_s`."""

    def __init__(self, daemon: Daemon, every_s: float) -> None:
        assert daemon.proc is not None
        self.daemon = daemon
        self.proc = psutil.Process(daemon.proc.pid)
        self.every_s = every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._thread.start()

    def sample(self) -> Sample:
        with self.proc.oneshot():
            s = Sample(
                t_s=time.monotonic(),  # made relative to the event phase by `close`
                rss_bytes=self.proc.memory_info().rss,
                fds=self.proc.num_fds(),
                threads=self.proc.num_threads(),
                children=len(self.proc.children(recursive=True)),
                cpu_s=_cpu_s(self.proc),
                healthy=self._healthy(),
            )
        self.samples.append(s)
        return s

    def _healthy(self) -> bool:
        try:
            return self.daemon.get("/healthz")[0] == 200
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sample()
            except psutil.Error:
                return  # the daemon is gone: the end of the run says why

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, origin: float = 0.0) -> list[Sample]:
        """Stop sampling; the samples with times in seconds from `origin` (monotonic)."""
        self._stop.set()
        self._thread.join(timeout=10)
        return [dataclasses.replace(s, t_s=round(s.t_s - origin, 3)) for s in self.samples]


# ---- faults --------------------------------------------------------------------------------------------


Fault = Callable[[FakeCluster, FakeCRI], None]


def _api(method: str, fragment: str, code: int, then: Callable[[FakeCluster], Any] | None = None) -> Fault:
    def inject(cluster: FakeCluster, cri: FakeCRI) -> None:
        cluster.fail(method, fragment, code)
        if then is not None:
            then(cluster)

    return inject


def _cri(code: grpc.StatusCode, message: str) -> Fault:
    def inject(cluster: FakeCluster, cri: FakeCRI) -> None:
        cri.service.inject_error(UPDATE, code, message)

    return inject


def _gone(cluster: FakeCluster) -> None:
    cluster.compact()
    cluster.drop_watches()


def _drop(cluster: FakeCluster) -> None:
    cluster.drop_watches()


FAULTS: dict[str, Fault] = {
    # list faults are hit at the relist a 410 forces; watch faults at the reopen a drop forces
    "list_500": _api("GET", "limit=", 500, _gone),
    "list_429": _api("GET", "limit=", 429, _gone),
    "watch_500": _api("GET", "watch=true", 500, _drop),
    "watch_429": _api("GET", "watch=true", 429, _drop),
    "status_500": _api("PATCH", "/status", 500),
    "status_429": _api("PATCH", "/status", 429),
    "event_500": _api("POST", "/events", 500),
    "event_429": _api("POST", "/events", 429),
    "watch_dropped": lambda cluster, cri: _drop(cluster),
    "gone_410": lambda cluster, cri: _gone(cluster),
    "cri_unavailable": _cri(grpc.StatusCode.UNAVAILABLE, "connection error: connection refused"),
    "cri_deadline": _cri(grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"),
    "cri_runc": _cri(
        grpc.StatusCode.UNKNOWN, RUNC_WRAP.format("unable to freeze container: freezer.state: device or resource busy")
    ),
}


def _unconsumed(env: Env) -> int:
    """Clear every armed fault; returns how many were never hit."""
    cluster = env.cluster
    with cluster.lock:
        left = sum(int(f[3]) for f in cluster.faults)
        cluster.faults.clear()
    service = env.cri.service
    with service.lock:
        left += sum(len(v) for v in service.errors.values())
        service.errors.clear()
    return left


# ---- the run -------------------------------------------------------------------------------------------


@dataclass
class Run:
    """The state of one soak: the node, who is alive, what was sent."""

    env: Env
    rng: random.Random
    target: int
    prober: Prober | None = None
    shapes: dict[str, Shape] = field(default_factory=dict)
    live: list[str] = field(default_factory=list)
    resized: set[str] = field(default_factory=set)
    sent: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    serial: int = 0
    journal: list[dict[str, Any]] = field(default_factory=list)  # what was sent and injected, when

    def note(self, what: str, name: str, **more: Any) -> None:
        self.journal.append({"t": round(time.time(), 4), "what": what, "name": name, **more})

    def applied(self, pod: str, ms: float) -> None:
        self.note("applied", pod, ms=round(ms, 2))

    def create(self) -> str:
        name = f"soak-{self.serial}"
        self.serial += 1
        shape = _shape(self.rng)
        containers = [ctr(f"c{i}", **_split(_resources(self.rng, s))) for i, s in enumerate(shape.styles)]
        self.env.node.add_pod(manifest(name, containers))
        self.shapes[name] = shape
        self.live.append(name)
        self.env.publish(name)
        return name

    def delete(self, name: str) -> None:
        """The kubelet tears the pod down, then the API object goes (a pod deleted gracefully)."""
        uid = self.env.uid(name)
        self.env.node.remove_pod(name)
        self.env.cluster.delete(uid)
        self.live.remove(name)
        self.resized.discard(name)
        del self.shapes[name]

    def resize(self, name: str, t_s: float, probe: bool) -> None:
        shape = self.shapes[name]
        i = self.rng.randrange(len(shape.styles))
        spec = self.env.node.pods[name].raw["spec"]["containers"][i]
        new = _resources(self.rng, shape.styles[i], _cpu_request(spec.get("resources") or {}))
        self.env.node.resize(name, {spec["name"]: new})
        self.resized.add(name)
        if probe and self.prober is not None:
            with self.prober.timing(name, t_s):
                self.env.publish(name)
        else:
            self.env.publish(name)

    def status_update(self, name: str) -> None:
        """A kubelet status write: the pod's IP and a container's readiness, nothing of its spec."""
        pod = api_pod(self.env.node, name)
        pod["status"]["podIP"] = f"10.{self.serial % 250}.{len(self.live) % 250}.{self.sent['status'] % 250}"
        pod["status"]["containerStatuses"][0]["ready"] = self.sent["status"] % 2 == 0
        self.env.cluster.apply(pod)

    def pick(self, resizable: bool = False) -> str | None:
        """A live pod that no probe is timing (and, when asked, that can be resized)."""
        for _ in range(20):
            name = self.rng.choice(self.live)
            if (self.prober is None or not self.prober.busy(name)) and (
                not resizable or self.shapes[name].resizable
            ):
                return name
        return None

    def event(self, t_s: float, probe: bool) -> str:
        """One event of the mix (15 % churn, 10 % status, 75 % resize), journaled; returns its kind. A
        resize with every resizable pod under a probe becomes a status update: the rate holds."""
        kind, name = self._event(t_s, probe)
        self.note(kind, name, **({"probe": True} if kind == "resize" and probe else {}))
        return kind

    def _event(self, t_s: float, probe: bool) -> tuple[str, str]:
        roll = self.rng.random()
        if roll < 0.15 and len(self.live) < self.target:
            return "create", self.create()
        if roll < 0.15 and (name := self.pick()) is not None:
            self.delete(name)
            return "delete", name
        if roll >= 0.25 and (name := self.pick(resizable=True)) is not None:
            self.resize(name, t_s, probe)
            return "resize", name
        name = self.rng.choice(self.live)
        self.status_update(name)
        return "status", name

    def inject(self, kind: str) -> None:
        FAULTS[kind](self.env.cluster, self.env.cri)
        self.faults[kind] += 1
        self.note("fault", kind)


def _split(resources: Mapping[str, Any]) -> dict[str, Any]:
    return {"req": resources.get("requests"), "lim": resources.get("limits")}


def _mismatched(run: Run) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in run.live:
        try:
            found = kubelet_mismatches(run.env.node, name)
        except (OSError, ValueError) as err:
            found = [str(err)]
        if found:
            out[name] = found
    return out


def _start(run: Run, daemon: Daemon, started: float) -> float:
    """Wait for /readyz and every pod's files at its spec; seconds since the daemon started."""
    pods = len(run.live)
    wait_for(lambda: daemon.get("/readyz")[0] == 200, "/readyz to answer 200", timeout=60 + pods / 10)
    _, behind = _converge(run, 60 + pods / 5)
    if behind:
        raise AssertionError(f"the daemon did not converge at start: {sorted(behind.items())[:3]}")
    return round(time.monotonic() - started, 2)


def _converge(run: Run, timeout_s: float) -> tuple[float, dict[str, list[str]]]:
    """Wait for every live pod's files to match its spec; (seconds taken, what still differs)."""
    start = time.monotonic()
    with suppress(AssertionError):
        wait_for(lambda: not _mismatched(run), "every live pod at its spec", timeout=timeout_s)
    return round(time.monotonic() - start, 2), _mismatched(run)


def _drive(run: Run, events: int, duration_s: float, fault_every_s: float | None, probe_every: int) -> float:
    """Send the events at an even rate and inject faults on their own schedule; returns the worst lag."""
    start = time.monotonic()
    gap = duration_s / max(events, 1)
    kinds = list(FAULTS)
    run.rng.shuffle(kinds)
    next_fault, worst_lag, resizes = fault_every_s, 0.0, 0
    for i in range(events):
        due = i * gap
        now = time.monotonic() - start
        if now < due:
            time.sleep(due - now)
        t_s = time.monotonic() - start
        worst_lag = max(worst_lag, t_s - due)
        while fault_every_s is not None and next_fault is not None and next_fault <= t_s:
            run.inject(kinds[sum(run.faults.values()) % len(kinds)])
            next_fault += fault_every_s
        kind = run.event(t_s, probe=resizes % probe_every == 0)
        resizes += kind == "resize"
        run.sent[kind] += 1
    left = duration_s - (time.monotonic() - start)
    if left > 0:
        time.sleep(left)
    return round(worst_lag, 3)


def _log_figures(daemon: Daemon, wall0: float, duration_s: float) -> tuple[Windows, Windows, int, int]:
    """From the daemon's log: reconcile durations per scope and window, crashes, non-JSON lines."""
    timed: dict[str, list[tuple[float, float]]] = {"pod": [], "tiers": []}
    crashes = raw = 0
    for line in daemon.lines():
        if "raw" in line:
            raw += 1
        elif line.get("event") == "reconcile.crashed":
            crashes += 1
        elif line.get("event") == "reconcile" and "duration_ms" in line and line.get("scope") in timed:
            t = datetime.fromisoformat(line["timestamp"]).timestamp() - wall0
            timed[line["scope"]].append((t, float(line["duration_ms"])))
    return Windows.of(timed["pod"], duration_s), Windows.of(timed["tiers"], duration_s), crashes, raw


def _resources_figures(samples: Sequence[Sample], duration_s: float) -> dict[str, Any]:
    """RSS at the end of the first tenth and at the end; descriptor/thread/children maxima per tenth."""
    window = duration_s / 10
    during = [s for s in samples if 0 <= s.t_s <= duration_s] or list(samples)
    first = [s for s in during if s.t_s <= window] or during[:1]
    last = [s for s in during if s.t_s >= duration_s - window] or during[-1:]
    rss_first, rss_last = first[-1].rss_bytes, last[-1].rss_bytes
    cpu = (during[-1].cpu_s - during[0].cpu_s) / max(during[-1].t_s - during[0].t_s, 1e-9)
    return {
        "window_s": round(window, 2),
        "rss_first_mib": round(rss_first / MIB, 2),
        "rss_last_mib": round(rss_last / MIB, 2),
        "rss_max_mib": round(max(s.rss_bytes for s in during) / MIB, 2),
        "rss_growth_pct": round(100 * (rss_last - rss_first) / rss_first, 2),
        "fds_first": max(s.fds for s in first),
        "fds_last": max(s.fds for s in last),
        "threads_first": max(s.threads for s in first),
        "threads_last": max(s.threads for s in last),
        "children_first": max(s.children for s in first),
        "children_last": max(s.children for s in last),
        "cpu_percent": round(100 * cpu, 2),
        "healthz_failures": sum(not s.healthy for s in samples),
    }


@contextmanager
def _node(workdir: Path) -> Iterator[Env]:
    """The daemon tests' node, built outside pytest, on a Node big enough that no resize waits for room;
    everything started here is stopped here (a daemon left running by an error: SIGTERM, by its PID)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with running_fake_cri(workdir) as cri:
        tree = FakeCgroupTree(workdir / "tree", "v1")
        node = ResizeNode(tree, cri, workdir / "harness-state", allocatable=f"cpu={NODE_CPU},memory={NODE_MEMORY}")
        node.check_every_pod = False  # O(pods) per runtime write otherwise; check() at the end sees all
        big = node_object()
        big["status"]["capacity"] = big["status"]["allocatable"] = {"cpu": NODE_CPU, "memory": NODE_MEMORY}
        with serving(workdir, node, cri, big, graceful=True) as env:
            yield env


def run_soak(
    workdir: Path,
    *,
    pods: int,
    events: int,
    duration_s: float,
    seed: int = 0,
    faults: bool = True,
    fault_every_s: float = 2.0,
    probe_every: int | None = None,
    sample_every_s: float | None = None,
    converge_timeout_s: float = 180.0,
) -> SoakResult:
    """Run one soak in `workdir` (created; the tree, the state, the daemon's config and log stay there).
    Raises AssertionError when the daemon never gets ready or never converges before the events."""
    began = time.monotonic()
    every = sample_every_s or min(5.0, max(1.0, duration_s / 60))
    # 1 resize in 20 on a long run; more on a short one, so that each tenth still holds a few dozen
    probe_every = probe_every or max(2, min(20, events // 400))
    with _node(workdir) as env:
        run = Run(env, random.Random(seed), pods)
        for _ in range(pods):
            run.create()
        started = time.monotonic()
        daemon = env.daemon()
        with Sampler(daemon, every) as sampler, Prober(env.node, run.applied) as prober:
            startup_s = _start(run, daemon, started)
            run.prober = prober
            phase, wall0, harness0 = time.monotonic(), time.time(), _cpu_s(psutil.Process())
            lag = _drive(run, events, duration_s, fault_every_s if faults else None, probe_every)
            harness_cpu = (_cpu_s(psutil.Process()) - harness0) / (time.monotonic() - phase)
            unconsumed = _unconsumed(env)
            converge_s, lost = _converge(run, converge_timeout_s)
            unresolved = prober.close()
            samples = sampler.close(phase)
        violations = [*env.node.violations, *env.node.check()]
        healthz = daemon.get("/healthz")[0]
        exit_code = daemon.terminate()
        pod_w, tiers_w, crashes, raw = _log_figures(daemon, wall0, duration_s)
    (workdir / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in run.journal))
    return SoakResult(
        pods=pods, events=events, duration_s=duration_s, seed=seed, faults=faults,
        events_sent=sum(run.sent.values()),
        events_by_kind=dict(run.sent),
        send_lag_max_s=lag,
        faults_injected=sum(run.faults.values()),
        faults_by_kind=dict(run.faults),
        faults_unconsumed=unconsumed,
        pods_checked=len(run.live),
        containers_checked=sum(len(run.shapes[p].styles) for p in run.live),
        resizes_checked=len(run.resized),
        resizes_lost=len(lost),
        lost_samples=tuple(f"{p}: {m[0]}" for p, m in sorted(lost.items())[:5]),
        probes=prober.count,
        probes_unresolved=unresolved,
        violations=len(violations),
        violation_samples=tuple(violations[:5]),
        crashes=crashes,
        raw_lines=raw,
        healthz_end=healthz,
        exit_code=exit_code,
        **_resources_figures(samples, duration_s),
        harness_cpu_percent=round(100 * harness_cpu, 2),
        apply_latency=Windows.of(prober.timed, duration_s),
        reconcile_pod=pod_w,
        reconcile_tiers=tiers_w,
        startup_s=startup_s,
        converge_s=converge_s,
        wall_s=round(time.monotonic() - began, 2),
        samples=tuple(samples),
    )
