"""deploy/daemonset.yaml against the kubernetes client's models, the ClusterRole verb by verb, and the
systemd unit through `systemd-analyze verify`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from agent.config.settings import from_mapping

REPO = Path(__file__).resolve().parents[2]
DOCS = list(yaml.safe_load_all((REPO / "deploy" / "daemonset.yaml").read_text()))
MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "ConfigMap": "V1ConfigMap",
    "DaemonSet": "V1DaemonSet",
    "CustomResourceDefinition": "V1CustomResourceDefinition",
    "ValidatingAdmissionPolicy": "V1ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding": "V1ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy": "V1MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding": "V1MutatingAdmissionPolicyBinding",
    "Deployment": "V1Deployment",
}
KEEPER = "kube-cgroup-agent-vpa-admission"  # deploy/vpa-admission: the VPA admission keeper


def _model(doc: dict[str, Any]) -> Any:
    """Build the client's own (pydantic) model: a missing required field or a wrong type raises."""
    return getattr(kubernetes.client, MODELS[doc["kind"]]).from_dict(doc)


def test_a_broken_document_is_refused_by_the_models() -> None:
    [ds] = [d for d in DOCS if d["kind"] == "DaemonSet"]
    broken = {**ds, "spec": {**ds["spec"], "selector": "not-a-selector"}}
    with pytest.raises(ValueError):
        _model(broken)


def _one(kind: str, name: str = "kube-cgroup-agent") -> Any:
    [doc] = [d for d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    return _model(doc)


def test_every_document_is_a_valid_object_of_its_kind() -> None:
    assert {d["kind"] for d in DOCS} == set(MODELS)
    names = sorted((d["kind"], _model(d).metadata.name) for d in DOCS)
    assert names == sorted([
        *((k, "kube-cgroup-agent") for k in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
                                              "DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")),
        ("CustomResourceDefinition", "nodehistories.kube-cgroup-agent.io"),
        ("ValidatingAdmissionPolicy", "kube-cgroup-agent-node-history"),
        ("ValidatingAdmissionPolicyBinding", "kube-cgroup-agent-node-history"),
        ("ValidatingAdmissionPolicy", "kube-cgroup-agent-vpa-annotation"),
        ("ValidatingAdmissionPolicyBinding", "kube-cgroup-agent-vpa-annotation"),
        ("CustomResourceDefinition", "vpaadmissionparams.kube-cgroup-agent.io"),
        ("MutatingAdmissionPolicy", "kube-cgroup-agent-vpa"),
        ("MutatingAdmissionPolicyBinding", "kube-cgroup-agent-vpa"),
        ("ValidatingAdmissionPolicy", "kube-cgroup-agent-rollout-turns"),
        ("ValidatingAdmissionPolicyBinding", "kube-cgroup-agent-rollout-turns"),
        *((k, KEEPER) for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
                                "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")),
    ])


def test_the_cluster_role_grants_exactly_what_the_agent_uses() -> None:
    role = _one("ClusterRole")
    granted = {
        (group, resource, verb)
        for rule in role.rules
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    assert granted == {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/status", "patch"),
        ("", "nodes", "get"),
        ("", "nodes", "list"),  # VPA in place: the panic-button label, this node only (field selector)
        ("", "nodes", "watch"),
        ("", "pods/resize", "patch"),  # VPA in place where the kubelet resizes
        ("apps", "replicasets", "get"),  # VPA in place: the owner chain, each link read once by name
        ("batch", "jobs", "get"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("", "limitranges", "list"),  # the bound of the annotations (agent/daemon/limitranges.py)
        ("", "limitranges", "watch"),
        # the local recommender (agent/recommender/publish.py)
        ("autoscaling.k8s.io", "verticalpodautoscalers", "list"),
        ("autoscaling.k8s.io", "verticalpodautoscalers", "watch"),
        ("autoscaling.k8s.io", "verticalpodautoscalers/status", "patch"),
        # its pod-level recommendation's annotation, where the CRD lacks the field (confined by its policy)
        ("autoscaling.k8s.io", "verticalpodautoscalers", "patch"),
        ("kube-cgroup-agent.io", "nodehistories", "get"),  # its own, after a restart
        ("kube-cgroup-agent.io", "nodehistories", "list"),  # a VPA's, by its label, to merge them
        ("kube-cgroup-agent.io", "nodehistories", "create"),  # its own only (the node-history policy)
        ("kube-cgroup-agent.io", "nodehistories", "update"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("coordination.k8s.io", "leases", "delete"),  # a rollout slot given back
        # graceful in-place updates, confined by the ValidatingAdmissionPolicy (test below)
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("apps", "statefulsets", "get"),  # the opt-in notice, when rollouts are off
        ("apps", "statefulsets", "list"),  # each of the node's pods' StatefulSets, watched by name
        ("apps", "statefulsets", "watch"),
        ("apps", "statefulsets", "patch"),
        ("apps", "daemonsets", "get"),  # the one whose pod here the keeper gave its turn; never listed or watched
        ("apps", "controllerrevisions", "get"),
        ("apps", "controllerrevisions", "list"),
    }
    assert all(not r.resource_names and not r.non_resource_urls for r in role.rules)
    binding = _one("ClusterRoleBinding")
    assert binding.role_ref.name == role.metadata.name
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", "kube-cgroup-agent", "kube-cgroup-agent")
    ]


def test_the_vpa_admission_keeper_reads_workloads_and_writes_only_its_own_objects() -> None:
    role = _one("ClusterRole", KEEPER)
    granted = {(g, r, v) for rule in role.rules for g in rule.api_groups for r in rule.resources for v in rule.verbs}
    read = {(g, r, v) for g, rs in (("autoscaling.k8s.io", ["verticalpodautoscalers"]), ("", ["limitranges", "replicationcontrollers"]),
                                    ("apps", ["deployments", "statefulsets", "daemonsets", "replicasets"]), ("batch", ["jobs", "cronjobs"]))
            for r in rs for v in ("list", "watch")}
    own = {("kube-cgroup-agent.io", "vpaadmissionparams", v) for v in ("list", "watch", "create", "patch", "delete")}
    # the target label on every VPA, by which each node watches its own (its own policy confines the patch)
    label = {("autoscaling.k8s.io", "verticalpodautoscalers", "patch")}
    # DaemonSet rollouts: a rolling DaemonSet's pods, their turn annotation (confined by its policy), its
    # revisions, an Event on it
    turns = {("", "pods", v) for v in ("list", "watch", "patch")} | {("apps", "controllerrevisions", v) for v in ("get", "list")} | {
        ("", "events", "create")}
    assert granted == read | own | label | turns
    assert all(not r.resource_names and not r.non_resource_urls for r in role.rules)
    binding = _one("ClusterRoleBinding", KEEPER)
    assert binding.role_ref.name == KEEPER
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", KEEPER, "kube-cgroup-agent")]
    deployment = _one("Deployment", KEEPER)
    spec = deployment.spec.template.spec
    assert deployment.spec.replicas == 1 and spec.service_account_name == KEEPER
    assert spec.security_context.run_as_non_root is True and spec.security_context.run_as_user == 65534
    [c] = spec.containers
    assert c.args[0] == "vpa-admission"
    # its endpoints on the pod IP, for the probes and Prometheus only (127.0.0.1 without the flags)
    assert {"--health-bind-address=$(POD_IP):9813", "--metrics-bind-address=$(POD_IP):9812"} <= set(c.args)
    assert {e.name: e.value_from.field_ref.field_path for e in c.env} == {"POD_IP": "status.podIP"}
    assert {(p.name, p.container_port) for p in c.ports} == {("metrics", 9812), ("health", 9813)}
    assert (c.liveness_probe.http_get.path, c.liveness_probe.http_get.port) == ("/healthz", "health")
    assert (c.readiness_probe.http_get.path, c.readiness_probe.http_get.port) == ("/readyz", "health")
    sc = c.security_context
    assert sc.allow_privilege_escalation is False and sc.read_only_root_filesystem is True and sc.capabilities.drop == ["ALL"]
    assert not spec.host_network and not spec.host_pid and not spec.volumes


def test_the_daemonset_runs_everywhere_with_only_the_privileges_it_needs() -> None:
    ds = _one("DaemonSet")
    spec = ds.spec.template.spec
    assert ds.spec.selector.match_labels.items() <= ds.spec.template.metadata.labels.items()
    assert spec.priority_class_name == "system-node-critical"
    assert [(t.operator, t.key, t.effect) for t in spec.tolerations] == [("Exists", None, None)]
    assert spec.service_account_name == "kube-cgroup-agent"
    assert not spec.host_network and not spec.host_pid and not spec.host_ipc
    [c] = spec.containers
    sc = c.security_context
    assert sc.privileged is False and sc.allow_privilege_escalation is False
    assert sc.read_only_root_filesystem is True and sc.capabilities.drop == ["ALL"] and not sc.capabilities.add
    assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
    env = {e.name: e.value_from.field_ref.field_path for e in c.env if e.value_from}
    assert env["NODE_NAME"] == "spec.nodeName"
    assert c.liveness_probe.http_get.path == "/healthz" and c.readiness_probe.http_get.path == "/readyz"
    # liveness only once the process listens: a slow start is not a hang (5 minutes to answer /healthz)
    assert c.startup_probe.http_get.path == "/healthz"
    assert c.startup_probe.period_seconds * c.startup_probe.failure_threshold >= 300
    ports = {p.name: p.container_port for p in c.ports}
    assert f"--health-bind-address=$(POD_IP):{ports['health']}" in c.args
    for kind in ("requests", "limits"):
        assert set(getattr(c.resources, kind)) == {"cpu", "memory"}
    mounts = {m.name: m.mount_path for m in c.volume_mounts}
    host = {v.name: v.host_path.path for v in spec.volumes if v.host_path}
    assert host == {
        "cgroupfs": "/sys/fs/cgroup",
        "cri-socket": "/run/containerd/containerd.sock",
        "state": "/var/lib/kube-cgroup-agent",
        "kubelet-config": "/var/lib/kubelet/config.yaml",
        "dbus": "/run/dbus",
    }
    assert mounts["cgroupfs"] == "/host/sys/fs/cgroup"
    assert mounts["kubelet-config"] == "/host/var/lib/kubelet/config.yaml"
    # systemd-driver nodes: the system bus at the path the agent dials by default (cgroupfs.systemd.bus),
    # read-only (connecting to a socket needs no write access to its mount), made empty where there is none
    from cgroupfs.systemd.bus import DEFAULT_SYSTEM_BUS_ADDRESS

    dbus = next(m for m in c.volume_mounts if m.name == "dbus")
    assert f"unix:path={dbus.mount_path}/system_bus_socket" == DEFAULT_SYSTEM_BUS_ADDRESS and dbus.read_only
    assert next(v for v in spec.volumes if v.name == "dbus").host_path.type == "DirectoryOrCreate"
    # the runtime's default AppArmor profile refuses D-Bus where the kernel mediates it; seccomp stays default
    assert sc.app_armor_profile.type == "Unconfined"
    # the daemon's measured RSS fits its request, and a command beside it fits the limit (docs/production.md)
    from kubernetes.utils import parse_quantity

    assert parse_quantity(c.resources.requests["memory"]) >= 171 * 2**20  # measured in the pod
    assert parse_quantity(c.resources.limits["memory"]) >= 2 * parse_quantity(c.resources.requests["memory"])


def test_the_configmap_is_a_valid_agent_config() -> None:
    cm = _one("ConfigMap")
    settings = from_mapping(yaml.safe_load(cm.data["config.yaml"]))
    assert str(settings.cgroupfs) == "/host/sys/fs/cgroup"
    assert settings.metrics_bind_address.startswith("127.0.0.1:")  # the default; the DaemonSet's args move it
    # the recommender off, and its history from Prometheus said to be off
    assert not settings.recommender.enabled
    raw = yaml.safe_load(cm.data["config.yaml"])
    assert raw["recommender"]["prometheus"] == {"address": ""} and not settings.recommender.prometheus.enabled


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    unit = (REPO / "systemd" / "kube-cgroup-agent.service").read_text()
    text = unit.replace("/usr/local/bin/kube-cgroup-agent", str(REPO / ".venv" / "bin" / "kube-cgroup-agent"))
    text = text.replace("/etc/kube-cgroup-agent/agent.env", str(REPO / "systemd" / "kube-cgroup-agent.env"))
    (tmp_path / "kube-cgroup-agent.service").write_text(text)
    r = subprocess.run(
        [analyze, "verify", str(tmp_path / "kube-cgroup-agent.service")],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"},
        check=False,
    )
    problems = [
        line
        for line in (r.stdout + r.stderr).splitlines()
        if "kube-cgroup-agent" in line and "Failed to" not in line.split("kube-cgroup-agent")[0]
    ]
    assert r.returncode == 0 and not problems, r.stdout + r.stderr
    assert "ProtectSystem=strict" in unit and "ReadWritePaths=/sys/fs/cgroup /var/lib/kube-cgroup-agent" in unit
    assert "Restart=always" in unit and "NoNewPrivileges=yes" in unit
