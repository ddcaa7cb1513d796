"""A Python model of deploy/vpa-admission/policy.yaml: what the MutatingAdmissionPolicy does to a pod, given
the namespace's VPAAdmissionParams, expression by expression (matchConditions, the variables `key`,
`same`, `samePod`, the one ApplyConfiguration mutation, merged as server-side apply merges it: maps by
key, `containers` by name).

Why a model: the CEL runs only inside a real API server (its `quantity()` library, `Object{}` apply
configurations and parameter binding are Kubernetes' own); `make e2e-k8s` compares the real one on the
container rows. This model lets the agreement table run everywhere, pod-level rows included; each step
names the expression it stands for, and tests/vpa/test_admission_agreement.py checks that the policy
still has those expressions.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from agent.pods.quantity import parse_any


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = [r for r in (pod.get("metadata") or {}).get("ownerReferences") or () if r.get("controller")]
    return refs[0] if refs else None


def key(pod: Mapping[str, Any], workloads: Mapping[str, Any]) -> str | None:
    """matchConditions `a-listed-workload` and the variable `key`: the workload entry of the pod's
    controller (itself, the Deployment behind a ReplicaSet named <name>-<pod-template-hash>, the CronJob
    behind a Job named <name>-<digits>); None when the policy does not match."""
    ref = _controller(pod)
    if ref is None:
        return None
    own = f"{ref['kind']}/{ref['name']}"
    if own in workloads:
        return own
    labels = (pod.get("metadata") or {}).get("labels") or {}
    h = labels.get("pod-template-hash", "")
    name = str(ref["name"])
    if ref["kind"] == "ReplicaSet" and h and name.endswith(f"-{h}"):
        k = f"Deployment/{name[: -len(h) - 1]}"
        return k if k in workloads else None
    if ref["kind"] == "Job" and name.rfind("-") > 0 and re.fullmatch(r"[0-9]+", name[name.rfind("-") + 1 :]):
        k = f"CronJob/{name[: name.rfind('-')]}"
        return k if k in workloads else None
    return None


def _same_list(have: Mapping[str, Any] | None, want: Mapping[str, Any] | None) -> bool:
    """One `size() == size() && all(r, r in from && quantity(...).compareTo(quantity(...)) == 0)`."""
    have, want = have or {}, want or {}
    return len(have) == len(want) and all(r in want and parse_any(str(q)) == parse_any(str(want[r])) for r, q in have.items())


def same(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    """The variable `same`: the pod's containers are the entry's, by name and order, each request and
    limit equal as a quantity to `from`."""
    containers = pod["spec"]["containers"]
    params = {p["name"]: p for p in entry["containers"]}
    if [c["name"] for c in containers] != [p["name"] for p in entry["containers"]]:
        return False
    return all(
        _same_list((c.get("resources") or {}).get(kind), params[c["name"]]["from"].get(kind))
        for c in containers
        for kind in ("requests", "limits")
    )


def same_pod(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    """The variable `samePod`: the pod's `spec.resources` are the entry's `pod.from`; none when the entry
    has no `pod`."""
    res = pod["spec"].get("resources") or {}
    want = entry["pod"]["from"] if "pod" in entry else {}
    return all(_same_list(res.get(kind), want.get(kind)) for kind in ("requests", "limits"))


def _merged(resources: Mapping[str, Any] | None, to: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(resources or {}))
    for kind in ("requests", "limits"):
        if to.get(kind):
            out[kind] = {**(out.get(kind) or {}), **to[kind]}
    return out


def admit(pod: Mapping[str, Any], params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pod as the policy leaves it (`params`: the namespace's object, None when there is none)."""
    out = copy.deepcopy(dict(pod))
    workloads = ((params or {}).get("spec") or {}).get("workloads")
    k = key(pod, workloads) if workloads else None
    if k is None:  # parameterNotFoundAction Allow, or matchConditions false
        return out
    entry = workloads[k]
    if not (same(pod, entry) and same_pod(pod, entry)):  # Object{}
        return out
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), "vpaUpdates": entry["updates"], "vpaObservedContainers": entry["observed"]}
    pod_level = "pod" in entry
    for p in entry["containers"]:  # the filter: `to.requests` set, or (with `pod`) `to.limits`
        if not (p["to"].get("requests") or (pod_level and p["to"].get("limits"))):
            continue
        c = next(c for c in out["spec"]["containers"] if c["name"] == p["name"])
        c["resources"] = _merged(c.get("resources"), p["to"])
    if pod_level:
        out["spec"]["resources"] = _merged(out["spec"].get("resources"), entry["pod"]["to"])
    return out
