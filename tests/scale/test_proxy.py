"""The proxy's count of watch events in the stream it forwards (bench/scale/proxy.py, EventScanner)."""

from __future__ import annotations

from bench.scale.proxy import EventScanner, parse_names

STREAM = (b'{"type":"MODIFIED","object":{"kind":"ReplicaSet","apiVersion":"apps/v1","status":{"conditions":'
          b'[{"type":"Ready","status":"True"}]}}}\n'
          b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}\n'
          b'{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1"}}\n')


def test_events_are_counted_by_type_and_kind_however_the_stream_is_cut() -> None:
    for size in (1, 7, 64, len(STREAM)):
        counts: dict[str, int] = {}
        scanner = EventScanner(counts)
        for i in range(0, len(STREAM) * 3, size):
            scanner.feed((STREAM * 3)[i:i + size])
        assert counts == {"MODIFIED ReplicaSet": 3, "BOOKMARK Pod": 3, "ADDED Pod": 3}, size


def test_a_condition_type_inside_an_object_is_not_an_event() -> None:
    counts: dict[str, int] = {}
    EventScanner(counts).feed(b'{"kind":"PodList","items":[{"status":{"conditions":[{"type":"Ready"}]}}]}')
    assert counts == {}


def test_ports_are_named_and_the_reference_passes_through() -> None:
    assert parse_names(["sim-000=6600", "reference=6599:raw"]) == {"sim-000": (6600, False), "reference": (6599, True)}
