"""`coordination.k8s.io/v1` Leases as the agents' only coordination (no central controller): a holder
takes a Lease by creating it, or by taking over one whose holder stopped renewing it; the API server's
optimistic concurrency (409) decides any race, so two nodes never both hold one.

Used for the recommender's merging node per VPA and for the rollout's update slots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.infra.apiserver import APIServer, path
from agent.infra.durations import parse_timestamp


def _lease(ns: str, name: str | None = None) -> str:
    return path("coordination.k8s.io/v1", "leases", ns, name)


def micro(now: float) -> str:
    """A MicroTime as the API writes it."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expired(spec: Mapping[str, Any], now: float, default_s: float) -> bool:
    renewed = parse_timestamp(spec.get("renewTime")) or 0.0  # unreadable: expired
    return renewed + float(spec.get("leaseDurationSeconds") or default_s) < now


@dataclass(frozen=True, slots=True)
class LeaseView:
    """What an acquire learnt: whether this holder has the Lease, who holds it, and until when (UNIX
    seconds) — so that a caller can leave a Lease another holds alone until it could have expired."""

    held: bool
    holder: str | None
    renewed: float
    expires: float


def acquire_lease(
    api: Any,
    ns: str,
    name: str,
    holder: str,
    duration_s: int,
    clock: Callable[[], float],
    labels: Mapping[str, str] | None = None,
    owners: Sequence[Mapping[str, Any]] = (),
) -> LeaseView:
    """Hold (create, renew, or take over an expired) Lease `name`, and say who holds it and until when (`held`
    False: another holder has it). `api`: the kubernetes client's ApiClient; `owners`: ownerReferences of a
    Lease this creates (so that the garbage collector deletes it with what it coordinates)."""
    from kubernetes.client.exceptions import ApiException

    server = APIServer(api)
    now = clock()
    mine = LeaseView(True, holder, now, now + duration_s)
    try:
        data = server.get(_lease(ns, name))
    except ApiException as err:
        if err.status != 404:
            raise
        meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels or {})}
        if owners:
            meta["ownerReferences"] = [dict(o) for o in owners]
        body = {"metadata": meta, "spec": {
            "holderIdentity": holder, "leaseDurationSeconds": duration_s, "acquireTime": micro(now), "renewTime": micro(now)}}
        try:
            server.create(_lease(ns), body)
            return mine
        except ApiException as create_err:
            if create_err.status == 409:
                return LeaseView(False, None, now, now)  # created by another at the same moment: look again later
            raise
    spec = data.get("spec") or {}
    current = spec.get("holderIdentity")
    if current != holder and not expired(spec, now, duration_s):
        renewed = parse_timestamp(spec.get("renewTime")) or 0.0
        return LeaseView(False, current, renewed, renewed + float(spec.get("leaseDurationSeconds") or duration_s))
    spec = {**spec, "holderIdentity": holder, "renewTime": micro(now), "leaseDurationSeconds": duration_s}
    if current != holder:
        spec["acquireTime"] = micro(now)
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    data["spec"] = spec
    try:
        server.replace(_lease(ns, name), data)
    except ApiException as err:
        if err.status == 409:
            return LeaseView(False, None, now, now)  # another holder renewed or took it first: look again later
        raise
    return mine


def release(api: Any, ns: str, name: str, holder: str) -> None:
    """Give the Lease up (delete it) if `holder` still holds it; gone already is fine."""
    from kubernetes.client.exceptions import ApiException

    server = APIServer(api)
    try:
        data = server.get(_lease(ns, name))
        if (data.get("spec") or {}).get("holderIdentity") != holder:
            return
        server.delete(_lease(ns, name), {"preconditions": {"resourceVersion": data["metadata"]["resourceVersion"]}})
    except ApiException as err:
        if err.status not in (404, 409):
            raise
