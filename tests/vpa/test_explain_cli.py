"""`explain`, `diff` and `plan` decide VPA pods as the daemon does (the same source), from --vpa manifests:
which VPA, the recommendation, each container's clamped target and why it was or was not applied — the
panic button, no opt-in, two VPAs, the kubelet's Infeasible — with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.commands.main import main
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest

MI = 1 << 20




def _vpa(name: str = "web", target: str = "Deployment/web", opted_in: bool = True) -> dict[str, Any]:
    kind, ref = target.split("/")
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if opted_in:
        meta["annotations"] = {"kube-cgroup-agent.io/vpa-actuator": "node"}
    return {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": meta,
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": ref}, "updatePolicy": {"updateMode": "InPlace"},
                 "resourcePolicy": {"containerPolicies": [{"containerName": "*", "maxAllowed": {"cpu": "2"}}]}},
        "status": {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "300m", "memory": "100Mi"},
             "lowerBound": {"cpu": "200m", "memory": "50Mi"}, "upperBound": {"cpu": "400m", "memory": "200Mi"}}]}},
    }


RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-6d4f", "namespace": "default",
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-1", "controller": True}]}}


def _node(labels: dict[str, str] | None = None, kubelet: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": labels or {}},
            "status": {"nodeInfo": {"kubeletVersion": kubelet}}}


def _setup(
    node: ResizeNode, tmp_path: Path, objects: list[dict[str, Any]], conditions: list[dict[str, Any]] | None = None, cpu: str = "100m", cpu_limit: str = "200m",
    pod_resources: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    if pod_resources is not None:  # two containers sharing one pod-level budget, none with resources of its own
        raw = manifest("web-6d4f-x", [ctr("app"), ctr("side")], resources=pod_resources)
    else:
        raw = manifest("web-6d4f-x", [ctr("app", req={"cpu": cpu, "memory": "100Mi"}, lim={"cpu": cpu_limit, "memory": "200Mi"})])
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4f", "uid": "rs-1", "controller": True}]
    node.add_pod(raw)
    pod = node.raw("web-6d4f-x")
    pod.setdefault("status", {})["startTime"] = "2026-11-25T00:00:00Z"
    if conditions:
        pod["status"]["conditions"] = conditions
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": [pod]}))
    vpa = tmp_path / "vpa.yaml"
    vpa.write_text(json.dumps({"kind": "List", "items": objects}))
    config = tmp_path / "config.yaml"
    config.write_text(
        f"cgroupfs: {node.tree.root}\npods: {pods}\nstateDir: {tmp_path / 'cli-state'}\nnodeName: n1\n"
        "cgroupVersion: '1'\nhugepageSizes: []\nallocatable: {cpu: '8', memory: 16Gi}\n"
    )
    return config, vpa


def _explain(config: Path, vpa: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["explain", "default/web-6d4f-x", "--config", str(config), "--vpa", str(vpa)]) == 0
    return capsys.readouterr().out


def test_explain_shows_the_vpa_its_recommendation_the_clamped_target_and_the_decision(
    node: ResizeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, vpa = _setup(node, tmp_path, [_vpa(), RS, _node()])
    quota = node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")
    before = node.read(quota)
    out = _explain(config, vpa, capsys)
    assert "VPA default/web: targetRef Deployment/web, updateMode InPlace, opted in" in out
    assert f"app: recommended cpu 300m, memory {100 * MI} (lower cpu 200m, memory {50 * MI}; upper cpu 400m, memory {200 * MI})" in out
    assert "policy (*): minAllowed none; maxAllowed cpu 2000m; controls cpu, memory; RequestsAndLimits" in out
    # 100m -> 300m; the limit keeps the pod's ratio 2 (GetProportionalLimit): 600m; memory 100Mi already is
    assert f"clamped target: requests cpu 300m, memory {100 * MI}; limits cpu 600m, memory {200 * MI}" in out
    assert "decision: applied — a request outside the recommended range" in out
    # the desired state is the daemon's: the VPA's values, and explain says where they came from
    assert "containers/app/requests/cpu: vpa" in out
    assert node.read(quota) == before  # nothing written

    assert main(["diff", "--config", str(config), "--vpa", str(vpa), "-o", "json"]) == 1
    containers = json.loads(capsys.readouterr().out)["containers"]
    quotas = {c["desired"] for c in containers if c["container"] == "app" and c["field"] == "cpu_quota"}
    assert quotas == {"60000"}  # the container's quota at the VPA's 600m
    assert node.read(quota) == before


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        ([_vpa(), RS, _node({"kube-cgroup-agent.io/vpa": "off"})], "VPA default/web: not applied — VPA changes are off on this node (panic button)"),
        ([_vpa(opted_in=False), RS, _node()], "decision: not applied — the VPA does not opt in"),
        ([_vpa(), _vpa("rs", "ReplicaSet/web-6d4f"), RS, _node()], "VPA: left alone — 2 VPAs target this pod's owner chain: default/rs, default/web"),
        ([_vpa(), _node()], "VPA: none controls this pod"),  # no ReplicaSet: the pod does not reach the Deployment
    ],
)
def test_explain_says_why_not(
    node: ResizeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: list[dict[str, Any]], expected: str
) -> None:
    config, vpa = _setup(node, tmp_path, objects)
    out = _explain(config, vpa, capsys)
    assert expected in out
    assert "containers/app/requests/cpu: vpa" not in out


def test_explain_on_a_kubelet_node_shows_the_kubelets_infeasible(
    node: ResizeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "Node didn't have enough capacity"}]
    # the spec holds what was sent through pods/resize (300m, limit 600m); the kubelet refused it
    config, vpa = _setup(node, tmp_path, [_vpa(), RS, _node(kubelet="v1.36.0")], pending, "300m", "600m")
    out = _explain(config, vpa, capsys)
    assert "last resize: Infeasible (Node didn't have enough capacity)" in out
    assert "decision: not applied — the resize to the recommendation is Infeasible" in out and "lowers" in out
    assert "containers/app/requests/cpu: vpa" not in out  # the kubelet's node: the spec changes, not the agent's view


def test_a_bad_vpa_file_is_one_line_and_exit_2(node: ResizeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, vpa = _setup(node, tmp_path, [])
    vpa.write_text("kind: [unclosed")
    assert main(["explain", "default/web-6d4f-x", "--config", str(config), "--vpa", str(vpa)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--vpa" in err[0] and "vpa.yaml" in err[0]
    assert main(["plan", "--config", str(config), "--vpa", str(tmp_path / "missing.yaml")]) == 2
    assert "No such file" in capsys.readouterr().err
    # an invalid VPA among good objects: a warning, the rest decided
    bad = _vpa("broken")
    bad["spec"]["updatePolicy"]["updateMode"] = "Sometimes"
    vpa.write_text(json.dumps({"kind": "List", "items": [bad, _vpa(), RS]}))
    out = _explain(config, vpa, capsys)
    assert "decision: applied" in out


def test_explain_shows_a_pod_level_pods_recommendation_its_bounds_and_target(
    node: ResizeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """app and side share one pod-level budget (200m/400Mi, limits 400m/800Mi). Summed: 600m + 200m = 800m,
    300Mi + 100Mi = 400Mi; the namespace's LimitRange type Pod (max cpu 1) caps the request at the one
    whose proportional limit (ratio 2) is 1 core: 500m, limit 1000m. Nothing written."""
    shared = {"requests": {"cpu": "200m", "memory": "400Mi"}, "limits": {"cpu": "400m", "memory": "800Mi"}}
    v = _vpa()
    v["spec"]["resourcePolicy"] = {}
    v["status"]["recommendation"]["containerRecommendations"] = [
        {"containerName": n, "target": {"cpu": c, "memory": m}, "lowerBound": {"cpu": cl, "memory": ml}, "upperBound": {"cpu": cu, "memory": mu}}
        for n, c, m, cl, ml, cu, mu in (("app", "600m", "300Mi", "500m", "250Mi", "1", "400Mi"),
                                        ("side", "200m", "100Mi", "150m", "80Mi", "400m", "200Mi"))
    ]
    lr = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "pods", "namespace": "default"},
          "spec": {"limits": [{"type": "Pod", "max": {"cpu": "1"}}]}}
    config, vpa = _setup(node, tmp_path, [v, RS, _node(), lr], pod_resources=shared)
    quota = node.pod_path("web-6d4f-x", "cpu.cfs_quota_us")
    before = node.read(quota)
    out = _explain(config, vpa, capsys)
    assert "app: recommended cpu 600m" in out and "counted in the pod level only" in out
    assert (f"pod level: recommended cpu 800m, memory {400 * MI} (lower cpu 650m, memory {330 * MI}; "
            f"upper cpu 1400m, memory {600 * MI}), summed from the containers'") in out
    assert "LimitRange type Pod: min none; max cpu 1000m" in out
    assert f"capped: cpu 500m, memory {400 * MI} (lower cpu 500m, memory {330 * MI}; upper cpu 500m, memory {600 * MI})" in out
    assert "pod level cpu capped to fit Max in Pod LimitRange" in out
    assert f"target spec.resources: requests cpu 500m, memory {400 * MI}; limits cpu 1000m, memory {800 * MI}" in out
    assert "decision: applied — a request outside the recommended range" in out
    assert "pod/requests/cpu: vpa" in out and "pod/limits/cpu: vpa" in out  # the pod cgroup follows the VPA's values
    assert node.read(quota) == before  # nothing written


def test_explain_admission_shows_the_pod_level_values_a_new_pod_gets(capsys: pytest.CaptureFixture[str]) -> None:
    samples = Path(__file__).resolve().parents[2] / "agent" / "commands" / "samples" / "admission"
    assert main(["explain", "--admission", str(samples / "podlevel-deployment.yaml"), "--vpa", str(samples / "podlevel-vpa.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # app's 250m/200Mi + log-shipper's 50m/56Mi = 300m/256Mi; cpu capped to maxAllowed 250m (limit 2×);
    # memory to the request whose 2× limit is the Pod LimitRange's 480Mi: 200Mi × 480Mi / 400Mi = 240Mi
    assert lines[1:5] == ["  pod requests.cpu: 200m -> 250m", f"  pod requests.memory: {200 * MI} -> {240 * MI}",
                          "  pod limits.cpu: 400m -> 500m", f"  pod limits.memory: {400 * MI} -> {480 * MI}"]
    assert "  pod: pod level memory capped to fit Max in Pod LimitRange" in lines
    assert "  app: unchanged (sized by the pod level)" in lines
    assert main(["explain", "--admission", str(samples / "podlevel-deployment.yaml"), "--vpa", str(samples / "podlevel-vpa.yaml"), "-o", "json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["pod"]["to"] == {"requests": {"cpu": "250m", "memory": str(240 * MI)}, "limits": {"cpu": "500m", "memory": str(480 * MI)}}
