"""The shell of the history from Prometheus against a tiny fake Prometheus: a container never seen waits for its
history while its samples are held back, then gets it before them; a Prometheus that answers garbage, an
HTTP error, nothing in time, the wrong type, too many series or too many bytes gives one log line and no
history, and the container's history is its node's own samples, as without Prometheus; a pod level (POD) gets
its pod cgroup's history in the same queries, and fails with them. No timing is asserted: the worker is
waited for."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent.config.settings import Settings
from agent.core.compute.pod import pod_cgroup_name
from agent.core.model import POD, QOSClass
from agent.core.ownership import resolve
from agent.daemon.components import DaemonContext
from agent.daemon.recommender import recommender_component
from agent.infra.metrics import Metrics
from agent.pipeline import Environment
from agent.pods.parse import parse_pod
from agent.recommender.config import PrometheusSettings, RecommenderSettings
from agent.recommender.history import GRACE_S, Fetch, HistoryLoader, http_fetch
from agent.recommender.prometheus import HistoryError, RangeQuery
from agent.recommender.state import Key, RecommenderState
from agent.recommender.trace import Sample
from cgroupfs.files import CgroupFiles
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import CgroupName
from tests.recommender.fake_prometheus import (
    CPU,
    HOUR,
    KEY,
    MAX_BYTES,
    MAX_SERIES,
    MEMORY,
    NOW,
    FakePrometheus,
    matrix,
    series,
)
from tests.recommender.podcgroup import MI, PodCgroup, Reading, pod
from tests.support.cgroup_tree import FakeCgroupTree


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    try:
        yield server
    finally:
        server.close()


def _settings(address: str, timeout_s: float = 5.0) -> RecommenderSettings:
    return RecommenderSettings(prometheus=PrometheusSettings(
        address=address, query_timeout_s=timeout_s, container_pod_name_label="pod", container_name_label="container",
        max_series=MAX_SERIES, max_bytes=MAX_BYTES))


def _history_lines(logs: Sequence[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if str(e["event"]).startswith("recommender.prometheus")]


LOCAL = [Sample(NOW, *KEY, memory=1.5e8), Sample(NOW + 1, *KEY, cpu=0.4, memory=1.6e8)]


def test_a_new_container_gets_its_history_before_its_own_samples(fake: FakePrometheus) -> None:
    model = _settings(fake.address)
    loader = HistoryLoader(model.prometheus, model, http_fetch(fake.address, MAX_BYTES))
    state = RecommenderState(model)
    with capture_logs() as logs:
        assert loader.feed(state, [KEY], LOCAL[:1], NOW) == 0  # held back: the history comes first
        assert KEY not in state.histories and loader.pending == 1
        assert loader.wait(10)
        assert loader.feed(state, [KEY], LOCAL[1:], NOW + 1) == 2  # the held sample, then this tick's
    [line] = _history_lines(logs)
    assert (line["event"], line["containers"], line["found"], line["series"]) == ("recommender.prometheus_history", 1, 1, 6)

    want = RecommenderState(model)  # the same samples through the normal path: Prometheus's first, in order
    want.observe_all([Sample(t, *KEY, cpu=v) for t, v in CPU] + [Sample(t, *KEY, memory=v) for t, v in MEMORY])
    want.observe_all(LOCAL)
    assert state.histories[KEY].to_dict() == want.histories[KEY].to_dict()
    assert list(state.histories) == [KEY]  # nothing of the containers the node does not run

    cpu, memory = fake.forms
    assert cpu["query"] == ('rate(container_cpu_usage_seconds_total{job="kubernetes-cadvisor", pod=~"api", '
                            'container!="POD", container!="", namespace=~"shop"}[1h])')
    assert memory["query"].startswith("container_memory_working_set_bytes{")
    assert (float(cpu["start"]), float(cpu["end"]), float(cpu["step"])) == (NOW - 8 * 86_400, NOW, 3600)
    assert 0 < float(cpu["timeout"]) <= 5
    # the container known now: no more queries, its samples straight in
    assert loader.feed(state, [KEY], [Sample(NOW + 2, *KEY, cpu=0.5)], NOW + 2) == 1
    assert len(fake.forms) == 2
    loader.close()


@pytest.mark.parametrize(("mode", "reason"), [
    ("garbage", "the cpu query: not a query_range matrix: not JSON"),
    ("http500", "the cpu query: HTTP 500: internal: out of memory"),
    ("slow", "the cpu query: no answer within"),
    ("drip", "the cpu query: no answer within"),
    ("wrong_type", "the cpu query: not a query_range matrix: resultType 'vector'"),
    ("many_series", f"the cpu query: {MAX_SERIES + 1} series, more than maxSeries ({MAX_SERIES})"),
    ("big_body", f"the cpu query: a response larger than maxBytes ({MAX_BYTES})"),
    ("big_declared", f"the cpu query: a response of {10**9} bytes, more than maxBytes ({MAX_BYTES})"),
    ("refused", "the cpu query: cannot reach 127.0.0.1:"),
])
def test_a_prometheus_that_fails_gives_one_line_and_the_nodes_own_history(
        fake: FakePrometheus, mode: str, reason: str) -> None:
    fake.mode = mode
    address = fake.address
    if mode == "refused":
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            address = f"http://127.0.0.1:{s.getsockname()[1]}"
    model = _settings(address, timeout_s=0.3 if mode in ("slow", "drip") else 5.0)
    loads: list[tuple[str, int, int]] = []
    loader = HistoryLoader(model.prometheus, model, http_fetch(address, MAX_BYTES),
                           on_load=lambda *told: loads.append(told))
    state = RecommenderState(model)
    other: Key = ("shop/api", "sidecar")  # a container with a history already: never asked about
    state.observe(Sample(NOW - 60, *other, cpu=0.1))
    with capture_logs() as logs:
        assert loader.feed(state, [KEY, other], [*LOCAL[:1], Sample(NOW, *other, cpu=0.2)], NOW) == 1
        assert loader.wait(10)
        assert loader.feed(state, [KEY, other], LOCAL[1:], NOW + 1) == 2
    [line] = _history_lines(logs)
    assert line["event"] == "recommender.prometheus_history_failed" and line["containers"] == 1
    assert str(line["error"]).startswith(reason), line
    assert line["address"] == address
    assert loads == [("failed", 0, 1)]  # the metrics' count: one failed load of one container
    want = RecommenderState(model)
    want.observe_all(LOCAL)
    assert state.histories[KEY].to_dict() == want.histories[KEY].to_dict()  # the node's own, as without Prometheus
    assert state.histories[other].samples == 2
    asked = len(fake.forms)
    assert asked <= 1  # the CPU query failed: the memory one was not sent
    assert loader.feed(state, [KEY, other], [Sample(NOW + 2, *KEY, cpu=0.5)], NOW + 2) == 1  # and on it goes
    assert len(fake.forms) == asked and loader.pending == 0
    loader.close()


def test_a_batch_not_answered_by_its_deadline_is_given_up_by_the_recommender() -> None:
    """The worker stuck (a lookup that hangs, say): the recommender's thread gives the batch up on its own
    clock, lets the held samples through, and drops what the worker brings later."""
    clock = [1000.0]
    release, asked = threading.Event(), threading.Event()

    def fetch(q: RangeQuery, left: float) -> bytes:
        asked.set()
        release.wait(10)
        return matrix([series(KEY, CPU if q.resource == "cpu" else MEMORY)])

    model = _settings("http://p", timeout_s=60.0)
    loader = HistoryLoader(model.prometheus, model, fetch, monotonic=lambda: clock[0])
    state = RecommenderState(model)
    with capture_logs() as logs:
        loader.feed(state, [KEY], LOCAL[:1], NOW)
        assert asked.wait(10)
        clock[0] += 2 * 60.0  # at its deadline: still waited for
        assert loader.feed(state, [KEY], [], NOW + 1) == 0 and loader.pending == 1
        clock[0] += GRACE_S + 1
        assert loader.feed(state, [KEY], LOCAL[1:], NOW + 2) == 2
        release.set()
        assert loader.wait(10)
        assert loader.feed(state, [KEY], [], NOW + 3) == 0  # the late answer is dropped
    [line] = _history_lines(logs)
    assert line["event"] == "recommender.prometheus_history_failed" and line["error"] == "no answer within 120s"
    want = RecommenderState(model)
    want.observe_all(LOCAL)
    assert state.histories[KEY].to_dict() == want.histories[KEY].to_dict()
    loader.close()


def test_containers_are_asked_about_by_batches_of_pods() -> None:
    forms: list[RangeQuery] = []

    def fetch(q: RangeQuery, left: float) -> bytes:
        forms.append(q)
        return matrix([])

    model = _settings("http://p")
    loader = HistoryLoader(model.prometheus, model, fetch)
    keys = [(f"ns/p{i:03d}", c) for i in range(100) for c in ("a", "b")]
    state = RecommenderState(model)
    with capture_logs() as logs:
        loader.feed(state, keys, [], NOW)
        assert loader.wait(10)
        loader.feed(state, keys, [], NOW)
    assert len(forms) == 14  # 100 pods: 6 batches of 16 and one of 4, two queries each
    assert [(e["containers"], e["found"]) for e in _history_lines(logs)] == [(32, 0)] * 6 + [(8, 0)]
    assert loader.pending == 0 and not state.histories
    loader.feed(state, keys, [], NOW + 1)
    assert len(forms) == 14  # nothing to be had: not asked again
    loader.close()


# ---- a pod level (POD): its pod cgroup's history, in the same two queries as its containers'

POD_KEY: Key = ("shop/api", POD)
POD_CPU = [(t, v + 0.3) for t, v in CPU]
POD_MEMORY = [(t, v + 5e7) for t, v in MEMORY]
SANDBOX = "registry.k8s.io/pause:3.10"  # containerd's sandbox: no container name either, but an image


def _mixed_fetch(asked: list[RangeQuery], failing: str | None = None) -> Fetch:
    def fetch(q: RangeQuery, left: float) -> bytes:
        asked.append(q)
        if q.resource == failing:
            raise HistoryError("HTTP 422: bad_data: unknown operator")
        cpu = q.resource == "cpu"
        pod_cgroups = [series(POD_KEY, POD_CPU if cpu else POD_MEMORY),
                       series(POD_KEY, [(NOW - HOUR / 2, 9.0 if cpu else 9e9)], image=SANDBOX),
                       series(("shop/db", POD), [(NOW, 1.0)])]  # a pod cgroup not asked about
        return matrix([series(KEY, CPU if cpu else MEMORY), *(pod_cgroups if 'container=""' in q.query else [])])

    return fetch


@pytest.mark.parametrize("failing", [None, "cpu", "memory"])
def test_a_pod_levels_history_comes_with_its_containers_and_fails_with_them(failing: str | None) -> None:
    asked: list[RangeQuery] = []
    loads: list[tuple[str, int, int]] = []
    model = _settings("http://p")
    loader = HistoryLoader(model.prometheus, model, _mixed_fetch(asked, failing), on_load=lambda *t: loads.append(t))
    state = RecommenderState(model)
    local = [*LOCAL, Sample(NOW, *POD_KEY, memory=4e8), Sample(NOW + 1, *POD_KEY, cpu=0.9, memory=4.1e8)]
    with capture_logs() as logs:
        assert loader.feed(state, [KEY, POD_KEY], local[::2], NOW) == 0  # both held back
        assert loader.wait(10)
        assert loader.feed(state, [KEY, POD_KEY], local[1::2], NOW + 1) == 4
    want = RecommenderState(model)  # Prometheus's samples first (none after a failure), then the held ones
    for key, cpu, memory in ((KEY, CPU, MEMORY), (POD_KEY, POD_CPU, POD_MEMORY)):
        if failing is None:
            want.observe_all([Sample(t, *key, cpu=v) for t, v in cpu] + [Sample(t, *key, memory=v) for t, v in memory])
    want.observe_all(sorted(local, key=lambda s: s.ts))
    assert {k: h.to_dict() for k, h in state.histories.items()} == {k: h.to_dict() for k, h in want.histories.items()}
    assert 'container="", image=""' in asked[0].query and len(asked) == (1 if failing == "cpu" else 2)
    [line] = _history_lines(logs)
    if failing is None:
        assert (line["event"], line["containers"], line["found"], line["series"]) == (
            "recommender.prometheus_history", 2, 2, 8)
        assert loads == [("loaded", 2, 2)]
    else:
        assert (line["event"], line["containers"]) == ("recommender.prometheus_history_failed", 2)
        assert line["error"] == f"the {failing} query: HTTP 422: bad_data: unknown operator"
        assert loads == [("failed", 0, 2)]
    loader.close()


def test_the_daemon_asks_for_a_pod_levels_history(
        fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path) -> None:
    tree = fake_cgroup_tree("v2")
    cg = PodCgroup(tree, "v2")
    settings = Settings(cgroupfs=tree.root, state_dir=tmp_path / "state",
                        recommender=RecommenderSettings(enabled=True, prometheus=_settings("http://p").prometheus))
    env = Environment(settings, tree.hierarchy, (), CgroupFiles(tree.root, ["kubepods"]))
    comp: Any = recommender_component(DaemonContext(settings, "n1", None, Metrics(), resolve({}, None, {}, False), env,
                                                    None, pods=lambda: [pod()]))
    asked: list[RangeQuery] = []
    comp.history.fetch, comp.clock = _mixed_fetch(asked), lambda: NOW
    cg.write({"": Reading(10.0, 300 * MI), "app": Reading(7.0, 200 * MI), "side": Reading(3.0, 100 * MI)})
    comp.tick()
    assert POD_KEY not in comp.state.histories and comp.history.wait(10)
    comp.clock = lambda: NOW + 2.0
    cg.write({"": Reading(11.0, 310 * MI), "app": Reading(7.6, 205 * MI), "side": Reading(3.4, 105 * MI)})
    comp.tick()
    h = comp.state.histories[POD_KEY]
    assert (h.samples, h.first_sample, h.last_sample) == (len(POD_CPU) + 1, POD_CPU[0][0], NOW + 2.0)
    assert comp.context.metrics.history_containers.labels("found")._value.get() == 2  # app and the pod level
    assert len(asked) == 2  # the pod level in its containers' two queries
    comp.history.close()


# ---- in the daemon

CID = "ab" * 32
UID = "0f0e0d0c-0000-4000-8000-000000000001"


def _pod() -> Any:
    return parse_pod({
        "metadata": {"name": "api", "namespace": "shop", "uid": UID},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{CID}", "state": {"running": {}}, "restartCount": 0}]},
    })


def test_the_daemons_recommender_loads_a_new_containers_history(
        fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, fake: FakePrometheus) -> None:
    tree = fake_cgroup_tree("v2")
    [leaf] = tree.create(f"{cgroup_dir(pod_cgroup_name(CgroupName(()), QOSClass.BURSTABLE, UID), tree.driver)}/{CID}")

    def write(usage_s: float, memory: int) -> None:
        for name, text in {"cpu.stat": f"usage_usec {int(usage_s * 1e6)}\nnr_periods 0\nnr_throttled 0\n",
                           "memory.current": str(memory), "memory.stat": "inactive_file 0\n",
                           "memory.peak": str(memory), "memory.events": "oom_kill 0\n"}.items():
            (tree.root / leaf / name).write_text(text)

    def context(recommender: RecommenderSettings) -> DaemonContext:
        settings = Settings(cgroupfs=tree.root, state_dir=tmp_path / "state", recommender=recommender)
        env = Environment(settings, tree.hierarchy, (), CgroupFiles(tree.root, ["kubepods"]))
        return DaemonContext(settings, "n1", None, Metrics(), resolve({}, None, {}, False), env, None,
                             pods=lambda: [_pod()])

    assert recommender_component(context(RecommenderSettings(enabled=True))).history is None  # type: ignore[union-attr]
    model = _settings(fake.address)
    comp: Any = recommender_component(context(RecommenderSettings(enabled=True, prometheus=model.prometheus)))
    assert comp.history is not None
    now = [NOW]
    comp.clock = lambda: now[0]
    write(10.0, 150_000_000)
    comp.tick()
    assert KEY not in comp.state.histories  # held back while its history loads
    assert comp.history.wait(10)
    now[0] += 2.0
    write(11.0, 160_000_000)
    comp.tick()
    h = comp.state.histories[KEY]
    assert h.samples == len(CPU) + 1  # 49 hours from Prometheus, then the node's own rate
    assert h.first_sample == CPU[0][0] and h.last_sample == NOW + 2.0
    metrics = comp.context.metrics
    assert metrics.history_loads.labels("loaded")._value.get() == 1
    assert metrics.history_containers.labels("found")._value.get() == 1
    assert metrics.history_containers.labels("missing")._value.get() == 0
    comp.history.close()


def test_the_worker_survives_what_a_fetch_raises() -> None:
    calls: list[int] = []

    def fetch(q: RangeQuery, left: float) -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return matrix([series(KEY, CPU if q.resource == "cpu" else MEMORY)])

    model = _settings("http://p")
    loader = HistoryLoader(model.prometheus, model, fetch)
    state = RecommenderState(model)
    with capture_logs() as logs:
        loader.feed(state, [("shop/api", "first")], [], NOW)
        assert loader.wait(10)
        loader.feed(state, [KEY], [], NOW)
        assert loader.wait(10)
        loader.feed(state, [KEY], [], time.time())
    assert [e["event"] for e in _history_lines(logs)] == ["recommender.prometheus_history_failed",
                                                         "recommender.prometheus_history"]
    assert _history_lines(logs)[0]["error"] == "RuntimeError: a bug"
    assert KEY in state.histories
    loader.close()
