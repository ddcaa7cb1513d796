"""What the agent keeps of an API object it holds between events.

Why: the daemon keeps the node's pods (for re-deriving them when a VPA or a recommendation changes) and
the components keep whole kinds cluster-wide (every ReplicaSet, for the owner chains). The API server
sends each object with `metadata.managedFields`, the server-side-apply bookkeeping of every field
manager, often the largest part of the object; nothing in the agent reads it. A ReplicaSet is read
only for its owner link, so only that is kept of it (a cluster holds about ten ReplicaSets a
Deployment, each with its whole pod template).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def without_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`obj` less `metadata.managedFields` (the same object when it has none: no copy)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def owner_link(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The kind, namespace, name and owner references of `obj`: all an owner chain reads of it."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    kept = {k: meta[k] for k in ("namespace", "name", "uid", "ownerReferences") if k in meta}
    return {"kind": obj["kind"], "metadata": kept} if "kind" in obj else {"metadata": kept}
