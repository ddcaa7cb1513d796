"""Pod manifests for tests, written short: `manifest(name, [ctr("app", req={...}, lim={...})], **spec)`,
`policy(...)` for resizePolicy, and the binary units to write byte quantities with."""

from __future__ import annotations

from typing import Any

GI = 1 << 30
MI = 1 << 20


def ctr(
    name: str, req: dict[str, Any] | None = None, lim: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if req is not None:
        res["requests"] = dict(req)
    if lim is not None:
        res["limits"] = dict(lim)
    return {"name": name, "resources": res, **extra}


def policy(cpu: str = "NotRequired", memory: str = "NotRequired") -> list[dict[str, str]]:
    return [
        {"resourceName": "cpu", "restartPolicy": cpu},
        {"resourceName": "memory", "restartPolicy": memory},
    ]


def manifest(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": containers, **spec},
    }
