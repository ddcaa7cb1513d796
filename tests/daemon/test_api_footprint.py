"""The daemon talks to the API server without the kubernetes client's typed API classes and models: those
modules cost the pod ~26 MiB (agent.infra.apiserver). The real daemon runs against the fake API server with
every component that uses the API on (limitranges, the VPA, the recommender, the opt-in notices), lists,
watches, resizes a pod and reports it; at its exit no `kubernetes.client.api.*` nor
`kubernetes.client.models.*` module was ever imported (one typed call put back anywhere imports both)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.vpa.target import TARGET_LABEL, target_value
from tests.daemon.harness import REPO, Daemon, Env, wait_for
from tests.resize.manifests import ctr, manifest

# `kube-cgroup-agent run ...` that writes the names of every module it imported when it exits
RUN = """
import atexit, json, pathlib, runpy, sys
out = pathlib.Path(sys.argv[1])
atexit.register(lambda: out.write_text(json.dumps(sorted(sys.modules))))
sys.argv = ["kube-cgroup-agent", *sys.argv[2:]]
runpy.run_module("agent", run_name="__main__")
"""
TYPED = ("kubernetes.client.api.", "kubernetes.client.models.")


class RecordingDaemon(Daemon):
    def __init__(self, config: Path, log: Path, modules: Path) -> None:
        super().__init__(config, log)
        self.modules = modules

    def start(self) -> RecordingDaemon:
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", RUN, str(self.modules), "run", "--config", str(self.config)],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self


def _run_recording(env: Env, tmp_path: Path, config: Path, components: tuple[str, ...]) -> RecordingDaemon:
    daemon = RecordingDaemon(config, tmp_path / "daemon.log", tmp_path / "modules.json")
    env.daemons.append(daemon)
    daemon.start()
    daemon.ready()
    for component in components:
        wait_for(lambda component=component: daemon.logged("component.started", component=component), component)
    return daemon


def _typed_modules(daemon: RecordingDaemon) -> list[str]:
    assert daemon.terminate() == 0
    imported = json.loads(daemon.modules.read_text())
    assert "agent.infra.apiserver" in imported and "kubernetes.client.api_client" in imported
    return [m for m in imported if m.startswith(TYPED)]


def _workloads(env: Env, vpa_annotation: bool) -> None:
    """A StatefulSet db and a Deployment web (through its ReplicaSet) with a pod each on this node, and web's
    VPA labelled with its target as the cluster's keeper labels it."""
    c = env.cluster
    c.serve("autoscaling.k8s.io", "v1", "verticalpodautoscalers", kind="VerticalPodAutoscaler")
    c.serve("apps", "v1", "statefulsets", kind="StatefulSet")
    c.serve("apps", "v1", "daemonsets", kind="DaemonSet")
    c.serve("apps", "v1", "replicasets", kind="ReplicaSet")
    c.put("apps", "v1", "statefulsets", {"metadata": {"name": "db", "namespace": "default", "uid": "s-1", "annotations": {
        "kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"}}, "spec": {}})
    c.put("apps", "v1", "replicasets", {"metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-1", "controller": True}]}})
    annotations = {"kube-cgroup-agent.io/vpa-actuator": "node"} if vpa_annotation else {}
    c.put("autoscaling.k8s.io", "v1", "verticalpodautoscalers", {"metadata": {
        "name": "web", "namespace": "default", "uid": "v-1", "annotations": annotations,
        "labels": {TARGET_LABEL: target_value("default", "Deployment", "web")}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}})
    for pod, kind, owner in (("db-0", "StatefulSet", "db"), ("web-1-x", "ReplicaSet", "web-1")):
        raw = manifest(pod, [ctr("app", lim={"cpu": "100m", "memory": "64Mi"})])
        raw["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": f"o-{owner}", "controller": True}]
        env.node.add_pod(raw)
        env.publish(pod)


def test_the_daemon_never_imports_the_typed_api_classes(env: Env, tmp_path: Path) -> None:
    c = env.cluster
    _workloads(env, vpa_annotation=False)  # the StatefulSet is told rollout is off (an opt-in notice)
    env.node.add_pod(manifest("g", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    env.publish("g")
    config = env.config(vpa={"enabled": True}, recommender={"enabled": True})
    daemon = _run_recording(env, tmp_path, config, ("limitranges", "vpa", "recommender", "opt-in-notices"))
    wait_for(lambda: c.count("GET", "/verticalpodautoscalers"), "the VPA watch")
    wait_for(lambda: c.count("POST", "/events"), "the opt-in notice")
    wait_for(lambda: daemon.logged("reconcile", pod="default/g"), "g's first pass")
    env.node.resize("g", {"app": {"limits": {"cpu": "1", "memory": "512Mi"}}})
    env.publish("g")
    wait_for(lambda: "ResizeDone" in c.event_reasons(env.uid("g")), "the ResizeDone event")
    wait_for(lambda: c.recorded("PATCH", "/status"), "the condition")
    assert _typed_modules(daemon) == []


def test_the_rollout_component_never_imports_the_typed_api_classes_either(env: Env, tmp_path: Path) -> None:
    c = env.cluster
    _workloads(env, vpa_annotation=True)  # the VPA is told VPA in place is off here (an opt-in notice)
    config = env.config(rollout={"enabled": True, "allowWithoutAdmissionPolicy": True})
    daemon = _run_recording(env, tmp_path, config, ("rollout", "opt-in-notices"))
    wait_for(lambda: c.count("GET", "/namespaces/default/statefulsets?"), "the watch of db, its pod's StatefulSet")
    assert c.count("GET", "/daemonsets") == 0  # no pod of a DaemonSet here: none watched
    wait_for(lambda: c.count("POST", "/events"), "the opt-in notice")
    assert _typed_modules(daemon) == []
