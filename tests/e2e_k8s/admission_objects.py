"""The objects and reads of tests/e2e_k8s/test_vpa_admission.py: workloads, VPAs and their status, the
namespace's VPAAdmissionParams, the pods the API server admitted, and what the node agent's VPA policy
computes for the same pod."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from agent.pods import quantity
from agent.pods.parse import parse_pod
from agent.vpa.parse import parse_vpa
from agent.vpa.policy import clamped_targets
from tests.e2e_k8s.nodes import IMAGE, ROOT, V1_NODE, kubectl, wait_for

NS = "kcg-vpa-admission"
NS_LR = "kcg-vpa-admission-lr"
NS_TIMED = "kcg-vpa-admission-timed"  # one VPA: the policy is evaluated once per parameter object of a namespace
VPA_CRD = ROOT / "tests" / "e2e_k8s" / "vpa-v1-crd.yaml"
TARGET = {"cpu": "250m", "memory": "200Mi"}
SIDE_TARGET = {"cpu": "80m", "memory": "48Mi"}


def _apply(*objs: Mapping[str, Any]) -> None:
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def _container(name: str, requests: Mapping[str, str] | None = None, limits: Mapping[str, str] | None = None) -> dict[str, Any]:
    res = {k: dict(v) for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"], "resources": res}


BURSTABLE = [_container("app", {"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m", "memory": "300Mi"}), _container("side", {"cpu": "50m", "memory": "32Mi"})]


def _pod_spec(containers: list[dict[str, Any]], node: str | None = V1_NODE) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": containers}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return spec


def _workload(kind: str, name: str, containers: list[dict[str, Any]], ns: str = NS, replicas: int = 0, node: str | None = V1_NODE) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": _pod_spec(containers, node)},
    }
    if kind != "DaemonSet":
        spec["replicas"] = replicas
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _vpa(name: str, target: str, mode: str, kind: str = "Deployment", ns: str = NS, policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}, "updatePolicy": {"updateMode": mode}}
    if policies:
        spec["resourcePolicy"] = {"containerPolicies": policies}
    return {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns, "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}},
        "spec": spec,
    }


def _recommend(name: str, ns: str = NS, app: Mapping[str, str] = TARGET, side: Mapping[str, str] | None = SIDE_TARGET) -> dict[str, Any]:
    recs = [{"containerName": "app", "target": dict(app)}]
    if side:
        recs.append({"containerName": "side", "target": dict(side)})
    status = {"recommendation": {"containerRecommendations": recs}}
    kubectl("-n", ns, "patch", "vpa", name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
    return status


def _params(ns: str = NS) -> dict[str, Any] | None:
    out = kubectl("-n", ns, "get", "vpaadmissionparams", "vpa-admission", "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _said(name: str, ns: str = NS) -> tuple[dict[str, Any] | None, str | None]:
    """(the workload entry VPA `name` set, why it sets nothing) in its namespace's object."""
    p = _params(ns)
    if p is None:
        return None, None
    entry = next((e for e in (p["spec"].get("workloads") or {}).values() if e["vpa"] == name), None)
    reason = next((s["reason"] for s in p["spec"].get("skipped") or () if s["vpa"] == name), None)
    return entry, reason


def _param_says(name: str, ns: str = NS, skipped: str | None = "") -> dict[str, Any]:
    """VPA `name`'s entry once the keeper has written it ("": it sets values), or once it says it sets
    nothing because of `skipped`; None: either, but not "no recommendation yet"."""

    def probe() -> dict[str, Any] | None:
        entry, reason = _said(name, ns)
        if skipped is None:
            return (entry or {"reason": reason}) if (entry or (reason and "no recommendation" not in reason)) else None
        if skipped == "":
            return entry
        return {"reason": reason} if reason and skipped in reason else None

    return wait_for(f"VPA {ns}/{name} in the namespace's VPAAdmissionParams ({skipped!r})", probe, 60)


def _scaled_pod(kind: str, name: str, ns: str = NS, replicas: int = 1) -> dict[str, Any]:
    """Scale up and return the new pod once it is scheduled."""
    kubectl("-n", ns, "scale", kind.lower(), name, f"--replicas={replicas}")
    return _scheduled(name, ns)[0]


def _scheduled(name: str, ns: str = NS, count: int = 1) -> list[dict[str, Any]]:
    def probe() -> list[dict[str, Any]] | None:
        pods = json.loads(kubectl("-n", ns, "get", "pods", "-l", f"app={name}", "-o", "json"))["items"]
        done = [p for p in pods if p["spec"].get("nodeName") and p.get("status", {}).get("qosClass")]
        return done if len(done) >= count else None

    return wait_for(f"{count} scheduled pod(s) of {name}", probe, 90)


def _values(c: Mapping[str, Any]) -> tuple[int | None, ...]:
    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    return (
        quantity.to_milli(req["cpu"], "cpu") if "cpu" in req else None,
        quantity.to_int(req["memory"], "memory") if "memory" in req else None,
        quantity.to_milli(lim["cpu"], "cpu") if "cpu" in lim else None,
        quantity.to_int(lim["memory"], "memory") if "memory" in lim else None,
    )


def _by_name(pod: Mapping[str, Any]) -> dict[str, tuple[int | None, ...]]:
    return {c["name"]: _values(c) for c in pod["spec"]["containers"]}


def _node_decision(spec: Mapping[str, Any], vpa_raw: Mapping[str, Any], status: Mapping[str, Any], ns: str = NS) -> dict[str, tuple[int | None, ...]]:
    """What the node agent's VPA source computes for this pod: agent.vpa.policy's targets (containers
    without one keep what they have)."""
    pod = parse_pod({"metadata": {"name": "p", "namespace": ns, "uid": str(uuid.uuid4())}, "spec": spec}, ())
    vpa = parse_vpa({**vpa_raw, "status": status})
    out: dict[str, tuple[int | None, ...]] = {c.name: (c.requests.cpu_milli, c.requests.memory, c.limits.cpu_milli, c.limits.memory) for c in pod.containers}
    if vpa.mode.value == "Off":
        return out
    for t in clamped_targets(pod, vpa):
        out[t.container] = (t.requests.cpu_milli, t.requests.memory, t.limits.cpu_milli, t.limits.memory)
    return out


MI = 1 << 20
