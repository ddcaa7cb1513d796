"""How the API server's requests and answers read, shared by the state (which answers Status bodies and
filters by label selectors) and the HTTP side (which routes paths and records requests)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Recorded:
    """One request as the server received it (`FakeCluster.recorded` and `count` read them)."""

    method: str
    path: str
    content_type: str
    body: Any
    user_agent: str = ""


def gkey(group: str, version: str, resource: str) -> str:
    """The key of a served kind: "group/version/resource" ("/v1/limitranges" for the core group)."""
    return f"{group}/{version}/{resource}"


def now() -> str:
    """A creationTimestamp."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """The Status body of a failed request."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


def _terms(selector: str) -> list[str]:
    """The comma-separated terms of a selector, commas inside a set `(a,b)` kept."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    terms.append(cur.strip())
    return [t for t in terms if t]


def labels_match(obj: dict[str, Any], selector: str) -> bool:
    """A `labelSelector` of `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists) and `!k`
    terms, comma-separated."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in _terms(selector):
        if " notin " in term or " in " in term:
            negate = " notin " in term
            k, values = term.split(" notin " if negate else " in ", 1)
            wanted = {v.strip() for v in values.strip().strip("()").split(",") if v.strip()}
            if (labels.get(k.strip()) in wanted) == negate:
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def fields_match(obj: dict[str, Any], selector: str) -> bool:
    """A `fieldSelector` of `metadata.name` and `metadata.namespace` equalities (what any kind serves)."""
    meta = obj.get("metadata") or {}
    for term in _terms(selector):
        k, _, v = term.replace("==", "=").partition("=")
        field = {"metadata.name": "name", "metadata.namespace": "namespace"}.get(k)
        if field is None or meta.get(field) != v:
            return False
    return True


def route(path: str) -> tuple[str, str, str | None, str | None, str | None, str | None] | None:
    """(group, version, namespace, resource, name, subresource) of an API path."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    resource = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return group, version, ns, resource, name, sub
