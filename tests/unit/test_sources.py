"""Sources of desired state: precedence field by field, provenance for `explain`, malformed input as a pod error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from agent.pods.parse import PodParseError, parse_pod
from agent.pods.sources import DEFAULT_SOURCES, Proposal, SourceInputError, merge
from agent.pods.sources.base import ContainerResources, Section


def _pod(annotations: Mapping[str, str] | None = None, resources: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1"}}},
            {"name": "side", "resources": {"requests": {"cpu": "50m"}}},
        ]
    }
    if resources is not None:
        spec["resources"] = resources
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": dict(annotations or {})},
        "spec": spec,
    }


class Fixed:
    """A source proposing a fixed value, for precedence tests (a stand-in for a VPA recommendation)."""

    def __init__(self, name: str, precedence: int, containers: Mapping[tuple[Section, str], ContainerResources]) -> None:
        self.name = name
        self.precedence = precedence
        self._containers = containers

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        return Proposal(self.name, self._containers, note=f"{self.name} says so")


RESIZE = "kube-cgroup-agent.io/resize"


def test_no_source_proposes_leaves_the_pod_and_no_provenance() -> None:
    raw = _pod()
    merged = merge(raw, DEFAULT_SOURCES)
    assert merged.raw is raw and merged.provenance == {}
    assert parse_pod(raw).provenance == {}


@pytest.mark.parametrize(
    ("low", "high", "expected_cpu_limit", "expected_source"),
    [
        # resize annotation (100) over a recommendation (50): the annotation's 2 wins
        (("vpa:ns/v", 50, "3"), (RESIZE, 100, "2"), 2000, "resize-annotation"),
        # a recommendation above a lower stand-in (20): the recommendation's 3 wins
        (("low", 20, "2"), ("vpa:ns/v", 50, "3"), 3000, "vpa:ns/v"),
    ],
)
def test_higher_precedence_wins_field_by_field(
    low: tuple[str, int, str], high: tuple[str, int, str], expected_cpu_limit: int, expected_source: str
) -> None:
    annotations = {}
    sources: list[Any] = list(DEFAULT_SOURCES)
    for name, prec, cpu in (low, high):
        if name == RESIZE:
            annotations[RESIZE] = json.dumps({"containers": {"app": {"limits": {"cpu": cpu}}}})
        else:
            sources.append(Fixed(name, prec, {("containers", "app"): {"limits": {"cpu": cpu}, "requests": {"memory": "100Mi"}}}))
    pod = parse_pod(_pod(annotations), sources)
    app = pod.containers[0]
    assert app.limits.cpu_milli == expected_cpu_limit
    assert pod.provenance["containers/app/limits/cpu"] == expected_source
    # a field only the recommendation proposed is the recommendation's, whatever wins the cpu limit
    assert app.requests.memory == 100 * 2**20
    assert pod.provenance["containers/app/requests/memory"] == "vpa:ns/v"
    # untouched fields keep the spec's value and have no provenance
    assert app.requests.cpu_milli == 100
    assert "containers/app/requests/cpu" not in pod.provenance
    assert pod.containers[1].requests.cpu_milli == 50


def test_equal_precedence_applies_in_the_order_given() -> None:
    a = Fixed("a", 50, {("containers", "app"): {"limits": {"cpu": "2"}}})
    b = Fixed("b", 50, {("containers", "app"): {"limits": {"cpu": "3"}}})
    assert parse_pod(_pod(), (a, b)).containers[0].limits.cpu_milli == 3000
    assert parse_pod(_pod(), (b, a)).containers[0].limits.cpu_milli == 2000


def test_defaulting_applies_to_a_proposal_as_to_the_spec() -> None:
    # a proposed memory limit with no memory request: the API's defaulting makes the request equal to it
    src = Fixed("vpa:ns/v", 50, {("containers", "side"): {"limits": {"memory": "128Mi"}}})
    side = parse_pod(_pod(), (src,)).containers[1]
    assert side.limits.memory == side.requests.memory == 128 * 2**20


def test_pod_level_annotation_only_where_the_spec_has_none() -> None:
    ann = {"kube-cgroup-agent.io/pod-resources": json.dumps({"limits": {"cpu": "2"}})}
    pod = parse_pod(_pod(ann))
    assert pod.pod_limits is not None and pod.pod_limits.cpu_milli == 2000
    assert pod.pod_level_source == "pod-resources-annotation"
    assert pod.provenance == {"pod/limits/cpu": "pod-resources-annotation"}
    spec_pod = parse_pod(_pod(ann, resources={"limits": {"cpu": "3"}}))
    assert spec_pod.pod_limits is not None and spec_pod.pod_limits.cpu_milli == 3000
    assert spec_pod.pod_level_source == "spec" and spec_pod.provenance == {}


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({RESIZE: "{"}, "is not valid JSON"),
        ({RESIZE: json.dumps({"containers": {"nope": {"limits": {"cpu": "1"}}}})}, "no container named 'nope'"),
        ({"kube-cgroup-agent.io/pod-resources": "[1]"}, '"requests": ..., "limits": ...'),
        ({"kube-cgroup-agent.io/pod-resources": json.dumps({"limits": 3})}, "limits must be a map"),
    ],
)
def test_malformed_source_input_is_one_pod_error(annotations: Mapping[str, str], message: str) -> None:
    with pytest.raises(PodParseError, match="ns/p: ") as err:
        parse_pod(_pod(annotations))
    assert message in err.value.message


def test_a_proposal_for_a_missing_container_names_the_source() -> None:
    src = Fixed("vpa:ns/v", 50, {("initContainers", "ghost"): {"limits": {"cpu": "1"}}})
    with pytest.raises(SourceInputError, match="vpa:ns/v: the pod has no init container named 'ghost'"):
        merge(_pod(), (src,))


@pytest.mark.parametrize(
    ("allowed", "namespace", "ok"),
    [
        (None, "ns", True),  # not configured: every namespace (as before)
        (frozenset({"ns"}), "ns", True),
        (frozenset({"other"}), "ns", False),
        (frozenset(), "ns", False),  # annotationNamespaces: [] — nowhere
    ],
)
def test_annotations_only_in_allowed_namespaces(allowed: frozenset[str] | None, namespace: str, ok: bool) -> None:
    from agent.pods.sources import default_sources

    for ann in ({RESIZE: json.dumps({"containers": {"app": {"limits": {"cpu": "2"}}}})},
                {"kube-cgroup-agent.io/pod-resources": json.dumps({"limits": {"cpu": "2"}})}):
        raw = _pod(ann)
        raw["metadata"]["namespace"] = namespace
        if ok:
            assert parse_pod(raw, default_sources(allowed)).provenance
        else:
            with pytest.raises(PodParseError, match=f"is not allowed in namespace '{namespace}'"):
                parse_pod(raw, default_sources(allowed))
    plain = _pod()  # a pod without the annotations is never affected
    plain["metadata"]["namespace"] = namespace
    assert parse_pod(plain, default_sources(allowed)).provenance == {}


def test_annotation_namespaces_setting() -> None:
    from agent.config.settings import ConfigError, from_mapping

    assert from_mapping({"annotationNamespaces": ["a", "b"]}).annotation_namespaces == frozenset({"a", "b"})
    assert from_mapping({"annotationNamespaces": ["*"]}).annotation_namespaces is None
    with pytest.raises(ConfigError, match="annotationNamespaces must be a list"):
        from_mapping({"annotationNamespaces": "a"})


def test_the_cli_reports_a_disallowed_annotation_as_that_pods_error(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from agent.commands.main import main

    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": [_pod({RESIZE: json.dumps({"containers": {"app": {"limits": {"cpu": "2"}}}})})]}))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"pods: {pods}\ncgroupfs: {tmp_path}\ncgroupVersion: '1'\nannotationNamespaces: [kube-system]\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "memory").mkdir()
    code = main(["diff", "--config", str(cfg), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2
    assert out["errors"] == [{"pod": "ns/p", "message": "annotation kube-cgroup-agent.io/resize is not allowed in namespace 'ns' (annotationNamespaces: kube-system)"}]
