"""Prometheus text and histogram quantiles (bench/scale/metrics.py), the audit log's records (audit.py)."""

from __future__ import annotations

import math

import pytest

from bench.scale import audit, metrics

TEXT = """# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="pods",verb="LIST"} 10
apiserver_request_total{code="200",resource="pods",verb="WATCH"} 3
apiserver_request_total{code="201",resource="pods",verb="POST"} 5
apiserver_request_duration_seconds_bucket{verb="GET",scope="resource",le="0.1"} 90
apiserver_request_duration_seconds_bucket{verb="GET",scope="resource",le="1"} 100
apiserver_request_duration_seconds_bucket{verb="GET",scope="resource",le="+Inf"} 100
etcd_mvcc_db_total_size_in_bytes 1.2e+07
"""


def test_text_is_parsed_into_series_by_labels() -> None:
    s = metrics.parse(TEXT)
    assert s["apiserver_request_total"][(("code", "200"), ("resource", "pods"), ("verb", "LIST"))] == 10
    assert s["etcd_mvcc_db_total_size_in_bytes"][()] == 1.2e7
    assert metrics.by(s["apiserver_request_total"], "verb") == {("LIST",): 10, ("WATCH",): 3, ("POST",): 5}


def test_a_counter_delta_counts_new_series_from_zero() -> None:
    before = metrics.parse(TEXT)
    after = metrics.parse(TEXT.replace("} 10", "} 25") + 'apiserver_request_total{code="200",resource="nodes",verb="GET"} 2\n')
    d = metrics.by(metrics.delta(after, before, "apiserver_request_total"), "resource", "verb")
    assert d[("pods", "LIST")] == 15
    assert d[("nodes", "GET")] == 2
    assert d[("pods", "POST")] == 0


def test_quantiles_interpolate_inside_the_bucket_as_prometheus_does() -> None:
    assert metrics.quantile(0.5, [(0.1, 50), (1.0, 100), (math.inf, 100)]) == pytest.approx(0.1)
    assert metrics.quantile(0.99, [(0.1, 90), (1.0, 100), (math.inf, 100)]) == pytest.approx(0.1 + 0.9 * 0.9)
    assert metrics.quantile(0.99, [(0.1, 0), (math.inf, 10)]) == pytest.approx(0.1)  # in +Inf: the last bound
    assert metrics.quantile(0.99, [(0.1, 0), (math.inf, 0)]) is None
    q = metrics.histogram_quantiles(metrics.parse(TEXT)["apiserver_request_duration_seconds_bucket"], 0.99, "verb")
    assert q[("GET",)] == pytest.approx(0.91)


def _event(**over: object) -> dict[str, object]:
    e: dict[str, object] = {
        "kind": "Event", "auditID": "a1", "stage": "ResponseComplete", "verb": "patch",
        "user": {"username": audit.AGENT_USER, "extra": {audit.NODE_CLAIM: ["sim-003"]}},
        "objectRef": {"resource": "pods", "subresource": "resize", "namespace": "own", "name": "p-1"},
        "responseStatus": {"code": 200}, "requestReceivedTimestamp": "2026-11-29T00:00:01.500000Z"}
    e.update(over)
    return e


def test_an_agent_is_told_apart_by_its_tokens_node_claim() -> None:
    got = audit.classify(_event())
    assert got is not None
    key, r = got
    assert key == "a1"
    assert (r.who, r.verb, r.resource, r.code, r.target) == ("agent:sim-003", "patch", "pods/resize", 200, "own/p-1")
    assert r.at == pytest.approx(1795910401.5)


def test_the_keeper_and_the_control_plane_are_named_and_non_events_skipped() -> None:
    keeper = audit.classify(_event(user={"username": audit.KEEPER_USER}))
    other = audit.classify(_event(user={"username": "system:apiserver"}, objectRef=None))
    assert keeper is not None and keeper[1].who == "keeper"
    assert other is not None and (other[1].who, other[1].resource) == ("other:system:apiserver", "nonresource")
    assert audit.classify({"kind": "EventList"}) is None
    recs = [r for e in (_event(), _event(verb="watch"), _event(verb="watch")) if (g := audit.classify(e)) for r in [g[1]]]
    assert audit.tally(recs) == {"watch pods/resize": 2, "patch pods/resize": 1}
