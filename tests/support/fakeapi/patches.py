"""The patch semantics of the API server, as far as the agent's objects need them: a JSON merge patch
(RFC 7386), a strategic merge patch (lists of objects merged by key), a JSON patch (RFC 6902), chosen by
the request's Content-Type. Pure functions: the store applies them under its lock."""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(target: Any, patch: Any) -> Any:
    """A strategic merge patch as far as the agent's objects need it: maps merge, lists of objects merge by
    their `name` (containers, volumes) or `type` (conditions) key, other lists are replaced."""
    if isinstance(patch, dict):
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if k.startswith("$"):
                continue
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(out.get(k), v)
        return out
    if isinstance(patch, list) and patch and all(isinstance(x, dict) for x in patch) and isinstance(target, list):
        key = "name" if all("name" in x for x in patch) else "type" if all("type" in x for x in patch) else None
        if key is not None:
            merged = [copy.deepcopy(x) for x in target]
            for item in patch:
                for i, old in enumerate(merged):
                    if isinstance(old, dict) and old.get(key) == item[key]:
                        merged[i] = strategic_merge(old, item)
                        break
                else:
                    merged.append(copy.deepcopy(item))
            return merged
    return copy.deepcopy(patch)


def json_patch(target: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 (add, replace, remove, test)."""
    doc = copy.deepcopy(target)
    for op in ops:
        path = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = doc
        for p in path[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last: Any = path[-1]
        if isinstance(parent, list):
            last = len(parent) if last == "-" else int(last)
        if op["op"] == "test":
            if parent[last] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, op["value"])
        else:
            parent[last] = op["value"]
    return doc


def apply_patch(target: dict[str, Any], body: Any, content_type: str) -> dict[str, Any]:
    """`target` patched with `body`, the kind of patch by its Content-Type (a merge patch otherwise)."""
    if content_type.startswith("application/json-patch+json"):
        out: dict[str, Any] = json_patch(target, body)
        return out
    if content_type.startswith("application/strategic-merge-patch+json"):
        return dict(strategic_merge(target, body))
    return dict(merge_patch(target, body))
