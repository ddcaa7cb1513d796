"""A source with outside state (a recommendation): `Daemon.refresh` derives the pod again and queues it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pytest

from agent.daemon.core import Daemon
from agent.infra.metrics import Metrics
from agent.infra.queue import TIERS
from agent.pods.sources import DEFAULT_SOURCES, Proposal


class Recommendation:
    """A stand-in dynamic source: proposes a CPU request once one is set."""

    name = "vpa:ns/v"
    precedence = 50

    def __init__(self) -> None:
        self.cpu: str | None = None

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        if self.cpu is None:
            return None
        return Proposal(self.name, {("containers", "app"): {"requests": {"cpu": self.cpu}}})


def _raw(uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{uid}", "namespace": "ns", "uid": uid},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


def _drain(d: Daemon) -> list[str]:
    out = []
    while len(d.queue):
        key = d.queue.get()
        out.append(key)
        d.queue.done(key)
    return out


def test_refresh_rederives_only_pods_whose_view_changed() -> None:
    rec = Recommendation()
    d = Daemon(
        cast(Any, None),
        cast(Any, None),
        cast(Any, None),
        Metrics(),
        node="n1",
        resync_period_s=60,
        sources=(*DEFAULT_SOURCES, rec),
    )
    d.upsert(_raw("u-1"))
    d.upsert(_raw("u-2"))
    assert set(_drain(d)) == {"u-1", "u-2", TIERS}
    d.refresh(["u-1"])  # nothing changed for the source: nothing to do but the tiers
    assert _drain(d) == [TIERS]
    rec.cpu = "300m"
    d.refresh(["u-1", "gone"])  # an unknown uid is ignored
    assert set(_drain(d)) == {"u-1", TIERS}
    views = {v.uid: v for v in d._views()}
    assert views["u-1"].containers[0].requests.cpu_milli == 300
    assert views["u-1"].provenance == {"containers/app/requests/cpu": "vpa:ns/v"}
    assert views["u-2"].containers[0].requests.cpu_milli == 100  # not refreshed yet
    d.refresh(None)  # every pod
    assert set(_drain(d)) == {"u-2", TIERS}
    assert {v.uid: v for v in d._views()}["u-2"].containers[0].requests.cpu_milli == 300


def test_without_components_the_daemon_keeps_views_not_the_pods_objects() -> None:
    """`keep_raw=False` (no component refreshes pods or reads their objects): a pod's object is not
    kept, a change that leaves its view as it was queues no pod pass, and asking for the objects is an
    error that names what needs them."""
    from agent.daemon.core import RawsNotKept

    d = Daemon(cast(Any, None), cast(Any, None), cast(Any, None), Metrics(), node="n1", resync_period_s=60, keep_raw=False)
    d.upsert(_raw("u-1"))
    assert set(_drain(d)) == {"u-1", TIERS}
    assert [v.uid for v in d.views()] == ["u-1"]
    assert all(e.raw is None for e in d._cache.values())
    same_view = _raw("u-1")
    same_view["metadata"]["resourceVersion"] = "2"  # not part of the view
    d.upsert(same_view)
    assert _drain(d) == [TIERS]
    changed = _raw("u-1")
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200m"
    d.upsert(changed)
    assert set(_drain(d)) == {"u-1", TIERS}
    with pytest.raises(RawsNotKept, match="refresh"):
        d.refresh(None)
    with pytest.raises(RawsNotKept, match="raws"):
        d.raws()


def test_the_pods_objects_are_kept_without_their_managed_fields() -> None:
    """The kept object is what re-deriving the pod reads: everything the API sent but its managedFields
    (often the larger part of a pod), so a refresh derives the same view."""
    rec = Recommendation()
    d = Daemon(cast(Any, None), cast(Any, None), cast(Any, None), Metrics(), node="n1", resync_period_s=60,
               sources=(*DEFAULT_SOURCES, rec))
    raw = _raw("u-1")
    raw["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    d.upsert(raw)
    (kept,) = d.raws()
    assert "managedFields" not in kept["metadata"]
    assert {k: v for k, v in kept.items() if k != "metadata"} == {k: v for k, v in raw.items() if k != "metadata"}
    assert kept["metadata"] == {"name": "p-u-1", "namespace": "ns", "uid": "u-1"}
    assert "managedFields" in raw["metadata"]  # the source's object is left as it was
    _drain(d)
    rec.cpu = "300m"
    d.refresh(["u-1"])
    assert set(_drain(d)) == {"u-1", TIERS}
    assert d.views()[0].containers[0].requests.cpu_milli == 300
