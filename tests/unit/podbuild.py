"""Small builders for pod manifests in tests (dicts, as a user or the API would write them)."""

from __future__ import annotations

from typing import Any

from agent.core.model import PodView
from agent.pods.parse import parse_pod


def res(req: dict[str, Any] | None = None, lim: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if req is not None:
        out["requests"] = req
    if lim is not None:
        out["limits"] = lim
    return out


def ctr(
    name: str, req: dict[str, Any] | None = None, lim: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"name": name, "resources": res(req, lim), **extra}


def pod(
    name: str,
    containers: list[dict[str, Any]],
    *,
    init: list[dict[str, Any]] | None = None,
    uid: str | None = None,
    overhead: dict[str, Any] | None = None,
    pod_resources: dict[str, Any] | None = None,
    namespace: str = "default",
    **spec: Any,
) -> dict[str, Any]:
    s: dict[str, Any] = {"containers": containers, **spec}
    if init:
        s["initContainers"] = init
    if overhead:
        s["overhead"] = overhead
    if pod_resources is not None:
        s["resources"] = pod_resources
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": s,
    }


def view(raw: dict[str, Any]) -> PodView:
    return parse_pod(raw)
