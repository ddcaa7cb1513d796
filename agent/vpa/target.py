"""The label that lets the API server hand each node only the VPAs of its own pods.

Why: a VPA names its workload in `spec.targetRef`, which no selector can filter on, and the opt-in is an
annotation, which no selector can filter on either; a node that watched VPAs unfiltered would receive
every VPA of the cluster (and every status the recommender rewrites, once a minute each) to keep the few
that concern it. So the cluster's one keeper (`kube-cgroup-agent vpa-admission`) puts on every VPA the
label `kube-cgroup-agent.io/target: <digest of namespace, kind and name of its targetRef>`, and each node
watches `kube-cgroup-agent.io/target in (...)` over the digests of its own pods' owner chains: the
server filters, a node receives what it acts on. The namespace is in the digest so that one watch serves
every namespace without receiving the many `Deployment/web` of other tenants.

A digest, not the names: a label value has at most 63 characters, a workload's name up to 253. 40 hex
digits (160 bits): a collision would only make a node receive one VPA more, which it then ignores (the
node resolves a VPA by its targetRef, never by the label).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

TARGET_LABEL: Final = "kube-cgroup-agent.io/target"
DIGITS: Final = 40


def target_value(namespace: str, kind: str, name: str) -> str:
    """The label value of a VPA whose targetRef is `kind`/`name` in `namespace`."""
    return hashlib.sha256(f"{namespace}/{kind}/{name}".encode()).hexdigest()[:DIGITS]


def wanted_value(vpa: Mapping[str, Any]) -> str | None:
    """The label value a VPA object should carry; None when its targetRef is unreadable (left unlabelled:
    no node acts on it, and the node's parser reports why to nobody, so the keeper says it)."""
    meta = vpa.get("metadata")
    spec = vpa.get("spec")
    ref = spec.get("targetRef") if isinstance(spec, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(ref, Mapping):
        return None
    ns, kind, name = meta.get("namespace"), ref.get("kind"), ref.get("name")
    if not (isinstance(ns, str) and isinstance(kind, str) and isinstance(name, str) and ns and kind and name):
        return None
    return target_value(ns, kind, name)


def label_of(vpa: Mapping[str, Any]) -> str | None:
    meta = vpa.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(TARGET_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else None


def selector(values: Iterable[str]) -> str | None:
    """The label selector of a node's VPA watch; None when the node has no pod any VPA could target."""
    wanted = sorted(set(values))
    return f"{TARGET_LABEL} in ({','.join(wanted)})" if wanted else None
