"""Pod input: every format a user hands over, the API server's defaulting and rounding, and hostile input
that must never reach a path."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.compute import ComputeConfig, compute_node
from agent.core.diff import desired_files
from agent.core.model import ModelError, validate_container_id, validate_pod_uid
from agent.pods.load import load_path, parse_text
from agent.pods.parse import parse_pod
from cgroupfs.layout import Hierarchy, RenderOptions
from cgroupfs.types import DriverKind
from tests.unit.podbuild import ctr, pod

POD_YAML = """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, uid: 0a0a0a0a-1111-2222-3333-444444444444}
spec:
  containers:
  - name: c
    resources: {limits: {cpu: 0.0001, memory: 1.5}}
"""


def test_yaml_json_list_and_multi_document_all_load(tmp_path: Path) -> None:
    one = parse_pod(pod("a", [ctr("c", lim={"cpu": "1"})], uid="0a0a0a0a-1111-2222-3333-444444444444"))
    as_json = json.dumps(pod("b", [ctr("c")], uid="0b0b0b0b-1111-2222-3333-444444444444"))
    multi = POD_YAML + "---\n" + POD_YAML.replace("name: a", "name: a2").replace("0a0a0a0a", "0c0c0c0c")
    (tmp_path / "one.yaml").write_text(POD_YAML)
    (tmp_path / "two.json").write_text(as_json)
    (tmp_path / "multi.yml").write_text(multi)
    (tmp_path / "notes.txt").write_text("not a manifest")
    loaded = load_path(str(tmp_path))
    assert sorted(p.name for p in loaded.pods) == ["a", "a2", "b"]
    # one.yaml and multi.yml both hold pod x/a with the same UID: the second is refused, not merged
    assert [(e.pod, e.message) for e in loaded.errors] == [
        ("x/a", "pod UID 0a0a0a0a-1111-2222-3333-444444444444 is also used by x/a: ignored")
    ]
    assert one.containers[0].requests.cpu_milli == 1000  # request defaults to the limit
    stdin = load_path("-", io.StringIO(json.dumps({"kind": "List", "items": [json.loads(as_json)]})))
    assert [p.name for p in stdin.pods] == ["b"]


def test_the_api_servers_rounding_cpu_to_millicores_up_and_bytes_up() -> None:
    (p,) = parse_text(POD_YAML, "x").pods
    assert p.containers[0].limits.cpu_milli == 1  # 0.0001 CPU rounds up to 1m
    assert p.containers[0].limits.memory == 2  # 1.5 bytes rounds up
    assert p.containers[0].requests.cpu_milli == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n", "metadata.uid is missing"),
        ("kind: Deployment\nmetadata: {name: a, uid: u1}\nspec: {}\n", "kind 'Deployment' is not a Pod"),
        (
            "kind: Pod\nmetadata: {name: a, uid: u1}\nspec: {containers: []}\n",
            "spec.containers must list at least one container",
        ),
        (
            "kind: Pod\nmetadata: {name: a, uid: u1}\nspec: {containers: [{name: c, resources: {limits: {cpu: lots}}}]}\n",
            "'lots' is not a valid quantity",
        ),
        (
            "kind: Pod\nmetadata: {name: a, uid: u1}\nspec: {containers: [{name: c, resources: {requests: {memory: -1Gi}}}]}\n",
            "must not be negative",
        ),
        (
            "kind: Pod\nmetadata: {name: a, uid: u1}\nspec: {containers: [{name: c}, {name: c}]}\n",
            "container name 'c' is used twice",
        ),
        (
            "kind: Pod\nmetadata: {name: a, uid: u1}\nspec: {containers: [{name: c, resizePolicy: [{resourceName: gpu, restartPolicy: NotRequired}]}]}\n",
            "resizePolicy resourceName 'gpu'",
        ),
        ("{not yaml: [", "not valid YAML or JSON"),
    ],
    ids=[
        "no-uid",
        "not-a-pod",
        "no-containers",
        "bad-quantity",
        "negative",
        "duplicate-name",
        "bad-resize-policy",
        "broken-yaml",
    ],
)
def test_bad_manifests_are_reported_not_raised(text: str, message: str) -> None:
    loaded = parse_text(text, "input.yaml")
    assert loaded.pods == ()
    assert len(loaded.errors) == 1 and message in loaded.errors[0].message


def test_resize_policy_noRestart_is_the_api_not_required() -> None:
    p = parse_pod(
        pod("a", [ctr("c", resizePolicy=[{"resourceName": "memory", "restartPolicy": "NoRestart"}])])
    )
    assert p.containers[0].resize_policy["memory"].value == "NotRequired"


hostile_text = st.one_of(
    st.sampled_from(
        [
            "..",
            "../../etc",
            "a/b",
            "/abs",
            "a\0b",
            "a\nb",
            "pod/../..",
            ".",
            "",
            "-",
            "a--b",
            "x" * 300,
            "ünï",
            "a_b",
        ]
    ),
    st.text(min_size=0, max_size=40),
)


@settings(max_examples=200, deadline=None)
@given(hostile_text)
def test_hostile_uids_never_validate_into_a_path(uid: str) -> None:
    try:
        ok = validate_pod_uid(uid)
    except ModelError:
        return
    assert "/" not in ok and ".." not in ok and ok.isascii() and "\0" not in ok and "_" not in ok


@settings(max_examples=200, deadline=None)
@given(hostile_text)
def test_hostile_container_ids_never_validate(cid: str) -> None:
    try:
        ok = validate_container_id(cid)
    except ModelError:
        return
    assert set(ok) <= set("0123456789abcdef")


@settings(max_examples=100, deadline=None)
@given(uid=hostile_text, name=hostile_text, cid=hostile_text, driver=st.sampled_from(list(DriverKind)))
def test_no_desired_file_from_hostile_input_lies_outside_the_kubepods_tree(
    uid: str, name: str, cid: str, driver: DriverKind
) -> None:
    raw = pod(name or "p", [ctr(name or "c", lim={"cpu": "1", "memory": "1Gi"})], uid=uid)
    raw["status"] = {"containerStatuses": [{"name": name or "c", "containerID": f"containerd://{cid}"}]}
    loaded = parse_text(json.dumps(raw), "hostile")
    comp = compute_node(loaded.pods, ComputeConfig())
    hierarchy = Hierarchy(v1={"cpu": "cpu", "memory": "memory"})
    for f in desired_files(comp, hierarchy, RenderOptions(driver)):
        parts = f.setting.path.split("/")
        assert ".." not in parts and "" not in parts and "\0" not in f.setting.path
        top = "kubepods.slice" if driver is DriverKind.SYSTEMD else "kubepods"
        assert parts[0] in ("cpu", "memory") and parts[1] == top


def test_pod_objects_from_the_kubernetes_client() -> None:
    from kubernetes.client import (
        V1Container,
        V1ContainerStatus,
        V1ObjectMeta,
        V1Pod,
        V1PodSpec,
        V1PodStatus,
        V1ResourceRequirements,
    )

    from agent.pods.load import from_objects

    obj = V1Pod(
        metadata=V1ObjectMeta(name="p", namespace="n", uid="0d0d0d0d-1111-2222-3333-444444444444"),
        spec=V1PodSpec(
            containers=[
                V1Container(name="c", resources=V1ResourceRequirements(limits={"cpu": "2", "memory": "1Gi"}))
            ]
        ),
        status=V1PodStatus(
            phase="Running",
            qos_class="Guaranteed",
            container_statuses=[
                V1ContainerStatus(
                    name="c",
                    container_id="containerd://" + "e" * 64,
                    image="i",
                    image_id="i",
                    ready=True,
                    restart_count=0,
                )
            ],
        ),
    )
    loaded = from_objects([obj])
    assert loaded.errors == ()
    (p,) = loaded.pods
    assert (p.key, p.containers[0].requests.cpu_milli, p.status_qos.value if p.status_qos else None) == (
        "n/p",
        2000,
        "Guaranteed",
    )
    assert p.statuses[0].container_id == "e" * 64 and p.statuses[0].runtime == "containerd"
