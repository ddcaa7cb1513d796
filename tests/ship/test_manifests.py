"""deploy/ as applied: the flat file is what the kustomize base renders, every manifest (base and overlays)
validates against the Kubernetes OpenAPI schema of a current release (kubernetes-validate's schemas, strict:
unknown fields are errors), the image is set in one place at the project's version, and the overlays give the
ownership they document."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import agent
from agent.config.settings import from_mapping

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMA_VERSION = "1.36.0"  # the release the real-cluster tier runs (make e2e-k8s)

_spec = importlib.util.spec_from_file_location("deploy_render", DEPLOY / "render.py")
assert _spec is not None and _spec.loader is not None
render_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_mod)

TARGETS = {
    "base": DEPLOY,
    "kubelet-owned": DEPLOY / "overlays" / "kubelet-owned",
    "bare-node": DEPLOY / "overlays" / "bare-node",
}


def _rendered(name: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = render_mod.render(TARGETS[name])
    return objects


def test_the_flat_file_is_what_the_base_renders() -> None:
    r = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), str(DEPLOY / "render.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    flat = [d for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()) if d]
    assert flat == _rendered("base")


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_manifest_validates_against_the_kubernetes_schema(name: str) -> None:
    objects = _rendered(name)
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    [ds] = [o for o in _rendered("base") if o["kind"] == "DaemonSet"]
    ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7  # wrong type
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, SCHEMA_VERSION, strict=True)
    ds = next(o for o in _rendered("base") if o["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"  # unknown field, strict
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, SCHEMA_VERSION, strict=True)


def test_the_image_is_set_in_one_place_at_the_project_version() -> None:
    version = agent.__version__
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "kube-cgroup-agent", "newName": "kube-cgroup-agent", "newTag": version}]
    base_files = "".join(p.read_text() for p in (DEPLOY / "base").glob("*.yaml") if p.name != "kustomization.yaml")
    assert "image: kube-cgroup-agent  #" in base_files and version not in base_files
    for name in TARGETS:
        images = [c["image"] for o in _rendered(name) if o["kind"] == "DaemonSet" for c in o["spec"]["template"]["spec"]["containers"]]
        assert images == [f"kube-cgroup-agent:{version}"]
    # the VPA admission component is its own kustomization (left out by older clusters): the same tag
    admission = yaml.safe_load((DEPLOY / "vpa-admission" / "kustomization.yaml").read_text())
    assert admission["images"] == kustomization["images"]
    keeper = [c["image"] for o in _rendered("base") if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]]
    assert keeper == [f"kube-cgroup-agent:{version}"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("base", {"qosReservedMemory": "auto", "podLevelLimits": "auto", "containerResizes": "auto"}),
        ("kubelet-owned", {"containerResizes": "kubelet", "podCgroups": "kubelet", "podLevelLimits": "auto",
                           "qosReservedMemory": "agent", "qosTiers": "agent"}),
        ("bare-node", {k: "agent" for k in ("containerResizes", "podCgroups", "podLevelLimits", "qosReservedMemory", "qosTiers")}),
    ],
)
def test_each_target_carries_a_valid_agent_config_with_its_ownership(name: str, expected: dict[str, str]) -> None:
    [cm] = [o for o in _rendered(name) if o["kind"] == "ConfigMap"]
    raw = yaml.safe_load(cm["data"]["config.yaml"])
    settings = from_mapping(raw)
    assert dict(settings.ownership) == expected
    assert settings.annotation_namespaces == frozenset(), "the annotations are honoured nowhere until namespaces are listed"
    assert str(settings.kubelet_config) == "/host/var/lib/kubelet/config.yaml"
    [ds] = [o for o in _rendered(name) if o["kind"] == "DaemonSet"]
    mounts = {m["name"]: m for m in ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["kubelet-config"]["mountPath"] == raw["kubeletConfig"] and mounts["kubelet-config"]["readOnly"] is True


def test_the_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nnamePrefix: x-\n")
    with pytest.raises(render_mod.RenderError, match="unsupported fields"):
        render_mod.render(tmp_path)


def test_kubectl_kustomize_renders_the_same_objects() -> None:
    kubectl = shutil.which("kubectl") or next(
        (str(p) for p in [Path("/var/cache/realk8s/bin/kubectl")] if p.exists()), None
    )
    if kubectl is None:
        pytest.skip("kubectl is not installed here (make e2e-k8s builds one into /var/cache/realk8s/bin)")
    for name, directory in TARGETS.items():
        out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True).stdout
        theirs = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out) if o}
        ours = {(o["kind"], o["metadata"]["name"]): o for o in _rendered(name)}
        assert theirs == ours, name


def test_a_rule_edited_into_the_flat_file_is_named_with_where_it_belongs() -> None:
    flat = _rendered("base")
    [role] = [o for o in flat if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "kube-cgroup-agent"]
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    [cm] = [o for o in flat if o["kind"] == "ConfigMap"]
    cm["data"]["config.yaml"] += "workers: 4\n"
    flat.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "extra"}})
    reasons = render_mod.stale_reasons(flat, _rendered("base"))
    assert reasons == [
        "ClusterRole rule {'apiGroups': [''], 'resources': ['secrets'], 'verbs': ['get']} is in "
        "deploy/daemonset.yaml but not in deploy/base/rbac.yaml: move it there (with the comment saying why)",
        "ConfigMap kube-cgroup-agent differs from deploy/base/: edit it there",
        "ServiceAccount extra is in deploy/daemonset.yaml only: add it to deploy/base/",
    ]
    assert render_mod.stale_reasons(_rendered("base"), _rendered("base")) == []
