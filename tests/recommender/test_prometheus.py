"""The pure parts of the history from Prometheus: the `recommender.prometheus` settings, VPA's queries narrowed
to the node's containers (and, for a pod level, POD, its pod cgroup's series in the same queries), a
`query_range` matrix parsed into series, series keyed as the sampler keys containers and pod levels, and the
histories their samples make."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.config.settings import from_mapping
from agent.core.model import POD
from agent.recommender.config import (
    PrometheusSettings,
    RecommenderSettings,
    parse_prometheus,
    parse_prometheus_duration,
    parse_recommender,
    prometheus_duration,
)
from agent.recommender.estimate import recommend
from agent.recommender.prometheus import (
    HistoryError,
    Series,
    histories,
    history_queries,
    parse_matrix,
    samples_by_key,
    selector,
    series_key,
)
from agent.recommender.state import Key, RecommenderState
from agent.recommender.trace import Sample

DEFAULT = PrometheusSettings(address="http://prometheus.monitoring.svc:9090")
MODERN = PrometheusSettings(address="http://p:9090", container_pod_name_label="pod", container_name_label="container")
NOW = 1_764_000_000.0

# ---- settings


def test_off_by_default_with_vpas_defaults() -> None:
    s = RecommenderSettings().prometheus
    assert not s.enabled and s.address == ""
    # config/config.go's defaults of the flags mirrored
    assert (s.query_timeout_s, s.history_length_s, s.history_resolution_s) == (300.0, 8 * 86_400.0, 3600.0)
    assert (s.cadvisor_job_name, s.history_cpu_metric, s.history_memory_metric) == (
        "kubernetes-cadvisor", "container_cpu_usage_seconds_total", "container_memory_working_set_bytes")
    assert (s.container_namespace_label, s.container_pod_name_label, s.container_name_label) == (
        "namespace", "pod_name", "name")


@pytest.mark.parametrize(("raw", "want"), [
    ({"address": "http://prometheus.monitoring.svc:9090/"}, {"address": "http://prometheus.monitoring.svc:9090"}),
    ({"address": "https://thanos.example/prefix"}, {"address": "https://thanos.example/prefix"}),
    ({"address": ""}, {"address": ""}),
    ({"queryTimeout": "30s"}, {"query_timeout_s": 30.0}),
    ({"queryTimeout": 90}, {"query_timeout_s": 90.0}),
    ({"historyLength": "8d", "historyResolution": "1h"}, {"history_length_s": 691_200.0, "history_resolution_s": 3600.0}),
    ({"historyLength": "2w", "historyResolution": "1h30m"}, {"history_length_s": 1_209_600.0, "history_resolution_s": 5400.0}),
    ({"historyResolution": "500ms"}, {"history_resolution_s": 0.5}),
    ({"cadvisorJobName": ""}, {"cadvisor_job_name": ""}),
    ({"containerPodNameLabel": "pod", "containerNameLabel": "container"},
     {"container_pod_name_label": "pod", "container_name_label": "container"}),
    ({"historyCpuMetric": "node:cpu_usage:rate"}, {"history_cpu_metric": "node:cpu_usage:rate"}),
    ({"maxSeries": 10, "maxBytes": 1024}, {"max_series": 10, "max_bytes": 1024}),
])
def test_keys_parse(raw: dict[str, Any], want: dict[str, Any]) -> None:
    got = parse_prometheus(raw)
    assert {name: getattr(got, name) for name in want} == want
    assert from_mapping({"recommender": {"prometheus": raw}}).recommender.prometheus == got


@pytest.mark.parametrize(("raw", "message"), [
    ({"url": "http://p"}, "recommender.prometheus: unknown setting 'url'"),
    ({"address": "prometheus:9090"}, "recommender.prometheus.address: 'prometheus:9090' is not an http:// or https:// URL"),
    ({"address": "http://user:secret@p:9090"}, "without credentials"),
    ({"address": 9090}, "recommender.prometheus.address: 9090 is not a URL"),
    ({"queryTimeout": "0s"}, "recommender.prometheus.queryTimeout: '0s' is not a duration above zero"),
    ({"queryTimeout": "5 minutes"}, "recommender.prometheus.queryTimeout: '5 minutes' is not a duration like 100ms"),
    ({"historyLength": "8 days"}, "recommender.prometheus.historyLength: '8 days' is not a Prometheus duration"),
    ({"historyLength": 8}, "recommender.prometheus.historyLength: 8 is not a Prometheus duration"),
    ({"historyLength": "1h", "historyResolution": "2h"}, "historyResolution must not exceed historyLength"),
    ({"containerNameLabel": "container-name"}, "'container-name' is not a Prometheus label name"),
    ({"historyCpuMetric": "cpu{job}"}, "'cpu{job}' is not a Prometheus metric name"),
    ({"maxSeries": 0}, "recommender.prometheus.maxSeries: 0 is not a positive integer"),
    ({"maxBytes": "8Mi"}, "recommender.prometheus.maxBytes: '8Mi' is not a positive integer"),
    ("http://p", "recommender.prometheus must be a map of settings"),
])
def test_bad_keys_are_named(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_recommender({"prometheus": raw})


def test_every_problem_at_once() -> None:
    with pytest.raises(ValueError) as err:
        parse_recommender({"prometheus": {"maxSeries": -1, "address": "ftp://x"}, "targetCpuPercentile": 2})
    assert str(err.value).count("recommender.") == 3


@pytest.mark.parametrize(("text", "seconds"), [
    ("8d", 691_200), ("1h", 3600), ("1h30m", 5400), ("90s", 90), ("500ms", 0.5), ("1w", 604_800),
    ("1y", 365 * 86_400), ("1d12h", 129_600),
])
def test_prometheus_durations(text: str, seconds: float) -> None:
    assert parse_prometheus_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "1.5h", "-1h", "1h1d", "h", "1 h", "5min"])
def test_not_prometheus_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        parse_prometheus_duration(text)


@given(st.integers(min_value=1, max_value=10**10))
def test_a_duration_written_reads_back(ms: int) -> None:
    assert parse_prometheus_duration(prometheus_duration(ms / 1000)) == pytest.approx(ms / 1000)


# ---- queries

KEYS = {("shop/api-0", "app"), ("shop/api-0", "sidecar"), ("web/front.v2", "nginx")}


@pytest.mark.parametrize(("settings", "cpu", "memory"), [
    (DEFAULT,
     'rate(container_cpu_usage_seconds_total{job="kubernetes-cadvisor", pod_name=~"api-0|front\\\\.v2", '
     'name!="POD", name!="", namespace=~"shop|web"}[1h])',
     'container_memory_working_set_bytes{job="kubernetes-cadvisor", pod_name=~"api-0|front\\\\.v2", '
     'name!="POD", name!="", namespace=~"shop|web"}'),
    (PrometheusSettings(address="http://p", cadvisor_job_name="", container_pod_name_label="pod",
                        container_name_label="container", history_resolution_s=300.0),
     'rate(container_cpu_usage_seconds_total{pod=~"api-0|front\\\\.v2", container!="POD", container!="", '
     'namespace=~"shop|web"}[5m])',
     'container_memory_working_set_bytes{pod=~"api-0|front\\\\.v2", container!="POD", container!="", '
     'namespace=~"shop|web"}'),
    (PrometheusSettings(address="http://p", cadvisor_job_name='kubelet "cadvisor"', history_resolution_s=5400.0,
                        history_cpu_metric="c", history_memory_metric="m"),
     'rate(c{job="kubelet \\"cadvisor\\"", pod_name=~"api-0|front\\\\.v2", name!="POD", name!="", '
     'namespace=~"shop|web"}[90m])',
     'm{job="kubelet \\"cadvisor\\"", pod_name=~"api-0|front\\\\.v2", name!="POD", name!="", namespace=~"shop|web"}'),
])
def test_vpas_queries_narrowed_to_the_nodes_containers(settings: PrometheusSettings, cpu: str, memory: str) -> None:
    q_cpu, q_memory = history_queries(settings, KEYS, NOW)
    assert (q_cpu.query, q_memory.query) == (cpu, memory)
    for q in (q_cpu, q_memory):
        assert (q.start, q.end, q.step_s) == (NOW - settings.history_length_s, NOW, settings.history_resolution_s)
    assert q_cpu.form(12.5) == {"query": cpu, "start": "1763308800", "end": "1764000000",
                                "step": f"{settings.history_resolution_s:g}", "timeout": "12.5"}
    assert "timeout" not in q_cpu.form()


def test_no_containers_no_query() -> None:
    with pytest.raises(ValueError):
        history_queries(DEFAULT, set(), NOW)


def _unquote(promql_string: str) -> str:
    """A PromQL double-quoted string's value (the escapes `selector` writes)."""
    assert promql_string[0] == promql_string[-1] == '"'
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), promql_string[1:-1])


@given(st.sets(st.tuples(st.text(min_size=1, max_size=8).filter(lambda t: "/" not in t), st.text(min_size=1, max_size=8)),
               min_size=1, max_size=5),
       st.text(max_size=12))
def test_the_pod_matcher_matches_exactly_the_pods_asked_about(pods: set[tuple[str, str]], other: str) -> None:
    keys = {(f"{ns}/{name}", "c") for ns, name in pods}
    text = selector(DEFAULT, keys)
    m = re.search(r'pod_name=~("(?:[^"\\]|\\.)*")', text)
    assert m is not None
    pattern = _unquote(m.group(1))  # RE2 and Python agree on these escapes and on alternation
    names = {name for _, name in pods}
    assert all(re.fullmatch(pattern, n, re.DOTALL) for n in names)
    assert bool(re.fullmatch(pattern, other, re.DOTALL)) == (other in names)


ANY_JOB = PrometheusSettings(address="http://p", cadvisor_job_name="", container_pod_name_label="pod",
                             container_name_label="container")
MIXED = {("shop/api-0", "app"), ("shop/api-0", POD), ("web/front.v2", "nginx")}
CONTAINERS = 'pod=~"api-0|front\\\\.v2", container!="POD", container!="", namespace=~"shop|web"'


@pytest.mark.parametrize(("settings", "keys", "cpu", "memory"), [
    (ANY_JOB, KEYS,  # no POD key: VPA's queries, nothing asked about the pod cgroups
     f'rate(container_cpu_usage_seconds_total{{{CONTAINERS}}}[1h])',
     f'container_memory_working_set_bytes{{{CONTAINERS}}}'),
    (ANY_JOB, MIXED,  # the same, or the pod cgroups of the POD keys' pods only
     f'rate(container_cpu_usage_seconds_total{{{CONTAINERS}}}[1h]) or rate(container_cpu_usage_seconds_total'
     '{pod=~"api-0", container="", image="", namespace=~"shop"}[1h])',
     f'container_memory_working_set_bytes{{{CONTAINERS}}} or container_memory_working_set_bytes'
     '{pod=~"api-0", container="", image="", namespace=~"shop"}'),
    (ANY_JOB, {("shop/api-0", POD), ("web/front.v2", POD)},  # pod levels only
     'rate(container_cpu_usage_seconds_total{pod=~"api-0|front\\\\.v2", container="", image="", '
     'namespace=~"shop|web"}[1h])',
     'container_memory_working_set_bytes{pod=~"api-0|front\\\\.v2", container="", image="", namespace=~"shop|web"}'),
    (DEFAULT, MIXED,  # VPA's labels and job
     'rate(container_cpu_usage_seconds_total{job="kubernetes-cadvisor", pod_name=~"api-0|front\\\\.v2", '
     'name!="POD", name!="", namespace=~"shop|web"}[1h]) or rate(container_cpu_usage_seconds_total'
     '{job="kubernetes-cadvisor", pod_name=~"api-0", name="", image="", namespace=~"shop"}[1h])',
     'container_memory_working_set_bytes{job="kubernetes-cadvisor", pod_name=~"api-0|front\\\\.v2", name!="POD", '
     'name!="", namespace=~"shop|web"} or container_memory_working_set_bytes{job="kubernetes-cadvisor", '
     'pod_name=~"api-0", name="", image="", namespace=~"shop"}'),
])
def test_pod_levels_add_their_pod_cgroups_to_the_same_two_queries(
        settings: PrometheusSettings, keys: set[Key], cpu: str, memory: str) -> None:
    q_cpu, q_memory = history_queries(settings, keys, NOW)
    assert (q_cpu.query, q_memory.query) == (cpu, memory)
    assert (q_cpu.start, q_cpu.end, q_memory.step_s) == (NOW - settings.history_length_s, NOW, 3600.0)


@given(st.sets(st.tuples(st.sampled_from(["shop", "web"]), st.sampled_from(["a", "b.c", "d"]),
                         st.sampled_from([POD, "app"])), min_size=1))
def test_the_pod_cgroups_asked_about_are_those_of_the_pod_keys(raw: set[tuple[str, str, str]]) -> None:
    keys = {(f"{ns}/{name}", c) for ns, name, c in raw}
    for q in history_queries(MODERN, keys, NOW):
        operands = q.query.split(" or ")
        for matcher, wanted in (('container!=""', {k for k in keys if k[1] != POD}),
                                ('container="", image=""', {k for k in keys if k[1] == POD})):
            asked = [o for o in operands if matcher in o]
            assert len(asked) == bool(wanted)
            for operand in asked:
                pods = re.search(r'pod=~("(?:[^"\\]|\\.)*")', operand)
                namespaces = re.search(r'namespace=~("(?:[^"\\]|\\.)*")', operand)
                assert pods is not None and namespaces is not None
                names = {n for n in ("a", "b.c", "d") if re.fullmatch(_unquote(pods.group(1)), n)}
                spaces = {n for n in ("shop", "web") if re.fullmatch(_unquote(namespaces.group(1)), n)}
                assert names == {k[0].partition("/")[2] for k in wanted}
                assert spaces == {k[0].partition("/")[0] for k in wanted}


# ---- the response

def _response(*series: tuple[dict[str, str], list[list[Any]]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": m, "values": v} for m, v in series]}}).encode()


APP = {"__name__": "container_memory_working_set_bytes", "container": "app", "endpoint": "https-metrics",
       "id": "/kubepods/burstable/pod0f0e/ab12", "image": "registry.example/api:1.2", "instance": "10.0.0.7:10250",
       "job": "kubernetes-cadvisor", "metrics_path": "/metrics/cadvisor", "name": "ab12", "namespace": "shop",
       "node": "n1", "pod": "api-0", "service": "kubelet"}


def test_a_real_looking_matrix() -> None:
    # as Prometheus 2.x answers /api/v1/query_range: times as numbers, values as strings
    body = (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":'
            + json.dumps(APP).encode()
            + b',"values":[[1763308800,"201326592"],[1763312400,"210763776"],[1763316000.5,"NaN"]]}]},'
            b'"warnings":["something"]}')
    [s] = parse_matrix(body, 10)
    assert s.labels == APP
    assert s.points[:2] == ((1763308800.0, 201326592.0), (1763312400.0, 210763776.0))
    assert s.points[2][0] == 1763316000.5 and s.points[2][1] != s.points[2][1]  # NaN, dropped by the model


@pytest.mark.parametrize(("body", "message"), [
    (b"<html>502 Bad Gateway</html>", "not JSON"),
    (b"", "not JSON"),
    (b"[1, 2]", "a JSON list"),
    (b'{"status":"error","errorType":"bad_data","error":"1:5: parse error"}', "Prometheus answered bad_data: 1:5: parse error"),
    (b'{"status":"weird"}', "status 'weird'"),
    (b'{"status":"success","data":{"resultType":"vector","result":[]}}', "resultType 'vector'"),
    (b'{"status":"success","data":{"resultType":"matrix","result":{}}}', "result is not a list"),
    (b'{"status":"success","data":[]}', "no data"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[1]}}', "a series is not an object"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":1},"values":[]}]}}', "metric"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,2]]}]}}', "[time"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[["1","2"]]}]}}', "[time"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}', "'x' is not a number"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":{}}]}}', "values are not a list"),
    (_response(*[({"i": str(i)}, []) for i in range(4)]), "4 series, more than maxSeries (3)"),
])
def test_what_is_not_a_matrix_is_one_reason(body: bytes, message: str) -> None:
    with pytest.raises(HistoryError, match=re.escape(message)):
        parse_matrix(body, 3)


@given(st.binary(max_size=200))
def test_garbage_is_a_history_error_never_another(body: bytes) -> None:
    with contextlib.suppress(HistoryError):
        parse_matrix(body, 10)


# ---- series to containers

@pytest.mark.parametrize(("settings", "labels", "key"), [
    (MODERN, APP, ("shop/api-0", "app")),
    (MODERN, {**APP, "container": "POD"}, None),
    (MODERN, {**APP, "container": ""}, None),
    (MODERN, {k: v for k, v in APP.items() if k != "namespace"}, None),
    (MODERN, {k: v for k, v in APP.items() if k != "pod"}, None),
    (DEFAULT, APP, None),  # VPA's default labels on a kubelet since 1.16: no pod_name there
    (DEFAULT, {"namespace": "shop", "pod_name": "api-0", "name": "app"}, ("shop/api-0", "app")),
])
def test_a_series_is_keyed_as_the_sampler_keys_its_container(
        settings: PrometheusSettings, labels: dict[str, str], key: tuple[str, str] | None) -> None:
    assert series_key(settings, labels) == key


# the pod cgroup of shop/api-0 as the kubelet's cAdvisor writes it and Prometheus keeps it (no empty label)
POD_CGROUP = {k: v for k, v in APP.items() if k not in ("container", "image", "name")} | {
    "id": "/kubepods/burstable/pod0f0e"}
SANDBOX = {**POD_CGROUP, "id": "/kubepods/burstable/pod0f0e/5e1f", "image": "registry.k8s.io/pause:3.10",
           "name": "5e1f"}  # containerd's: no container name either, but an image


@pytest.mark.parametrize(("settings", "labels", "key"), [
    (MODERN, POD_CGROUP, ("shop/api-0", POD)),
    (MODERN, {**POD_CGROUP, "container": "", "image": ""}, ("shop/api-0", POD)),  # empty is absent
    (MODERN, SANDBOX, None),
    (MODERN, {**SANDBOX, "container": "POD"}, None),  # dockershim's and CRI-O's sandbox
    (MODERN, {k: v for k, v in POD_CGROUP.items() if k != "pod"}, None),  # a QoS or the kubepods cgroup
    (MODERN, {k: v for k, v in POD_CGROUP.items() if k != "namespace"}, None),
    (DEFAULT, POD_CGROUP, None),
    (DEFAULT, {"namespace": "shop", "pod_name": "api-0", "id": "/kubepods/burstable/pod0f0e"}, ("shop/api-0", POD)),
])
def test_a_pod_cgroups_series_is_keyed_as_the_pod_level(
        settings: PrometheusSettings, labels: dict[str, str], key: tuple[str, str] | None) -> None:
    assert series_key(settings, labels) == key


@pytest.mark.parametrize("wanted", [True, False])
def test_a_pod_cgroups_samples_are_the_pod_levels_only_when_wanted(wanted: bool) -> None:
    t0 = 1_763_308_800.0
    cpu = [Series(POD_CGROUP, ((t0 + 3600, 0.6), (t0, 0.5))), Series(APP, ((t0, 0.2),)),
           Series(SANDBOX, ((t0 + 60, 9.0),)),
           Series({**POD_CGROUP, "pod": "api-1"}, ((t0, 9.0),))]  # the pod cgroup of a pod not asked about
    memory = [Series(POD_CGROUP, ((t0, 5e8),)), Series(SANDBOX, ((t0 + 60, 9e9),))]
    keys = {("shop/api-0", "app"), ("shop/api-1", "app"), *([("shop/api-0", POD)] if wanted else [])}
    got = samples_by_key(MODERN, cpu, memory, keys)
    assert {k: [(s.ts, s.pod, s.container, s.cpu, s.memory) for s in v] for k, v in got.items()} == {
        ("shop/api-0", "app"): [(t0, "shop/api-0", "app", 0.2, None)],
        **({("shop/api-0", POD): [(t0, "shop/api-0", POD, 0.5, None), (t0, "shop/api-0", POD, None, 5e8),
                                  (t0 + 3600, "shop/api-0", POD, 0.6, None)]} if wanted else {})}


def test_a_working_set_of_0_is_left_out_so_the_later_peaks_count() -> None:
    """The first scrape of a new pod cgroup reads 0 (nothing charged yet, before its containers). Kept, VPA's
    aggregation would never replace that peak of 0 within its 24 h interval and the memory target would be
    the first bucket's (as on the real cluster: 11.5 MB for a pod holding 42 MB); left out, 42 MB counts."""
    t0 = 1_763_308_800.0
    settings = RecommenderSettings(pod_recommendation_min_memory_mb=1)
    memory = [Series(POD_CGROUP, ((t0, 0.0), (t0 + 60, 42e6), (t0 + 120, 42e6)))]
    cpu = [Series(POD_CGROUP, ((t0 + 60, 0.2), (t0 + 120, 0.2)))]
    keys = {("shop/api-0", POD)}
    got = samples_by_key(MODERN, cpu, memory, keys)
    assert [s.memory for s in got[("shop/api-0", POD)] if s.memory is not None] == [42e6, 42e6]
    kept = dict(got)
    kept[("shop/api-0", POD)] = sorted([*got[("shop/api-0", POD)], Sample(t0, "shop/api-0", POD, memory=0.0)], key=lambda s: s.ts)
    target = recommend(histories(settings, got)[("shop/api-0", POD)], settings, 1).target.memory
    frozen = recommend(histories(settings, kept)[("shop/api-0", POD)], settings, 1).target.memory
    assert target > 42e6 and frozen < 12e6, (target, frozen)  # what VPA's aggregation makes of the 0


def test_samples_of_the_nodes_containers_only_sorted_by_time() -> None:
    t0 = 1_763_308_800.0
    cpu = [
        Series({**APP, "pod": "api-1"}, ((t0, 9.0),)),  # not on this node
        Series({**APP, "container": "debug"}, ((t0, 9.0),)),  # a container the node does not run
        Series({**APP, "namespace": "web"}, ((t0, 9.0),)),  # the same pod name elsewhere
        Series(APP, ((t0 + 3600, 0.3), (t0, 0.2))),
        Series({**APP, "id": "/kubepods/burstable/pod0f0e/cd34"}, ((t0, 0.25),)),  # restarted: a second series
    ]
    memory = [Series(APP, ((t0, 2e8), (t0 + 3600, 3e8)))]
    got = samples_by_key(MODERN, cpu, memory, {("shop/api-0", "app"), ("shop/api-0", "sidecar")})
    assert list(got) == [("shop/api-0", "app")]
    assert [(s.ts, s.cpu, s.memory) for s in got[("shop/api-0", "app")]] == [
        (t0, 0.2, None), (t0, 0.25, None), (t0, None, 2e8), (t0 + 3600, 0.3, None), (t0 + 3600, None, 3e8)]


def test_the_histories_are_those_of_the_same_samples_observed() -> None:
    s = RecommenderSettings()
    t0 = 1_763_308_800.0
    samples = [Sample(t0 + 3600 * i, "shop/api-0", "app", cpu=0.1 * (i % 7), memory=1e8 + 1e6 * i) for i in range(200)]
    got = histories(s, {("shop/api-0", "app"): samples, ("shop/api-0", "idle"): [Sample(t0, "shop/api-0", "idle", cpu=float("nan"))]})
    want = RecommenderState(s)
    want.observe_all(samples)
    assert list(got) == [("shop/api-0", "app")]  # a container whose samples the model all refused has none
    assert got[("shop/api-0", "app")].to_dict() == want.histories[("shop/api-0", "app")].to_dict()
