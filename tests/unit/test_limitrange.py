"""The LimitRange bound of annotation-driven changes: LimitRanger's validation rules one by one (container
min/max on request and limit, the limit/request ratio, the pod's sums with init containers, sidecars and
pod-level resources, several LimitRanges, none, a malformed one), and how a refused annotation reaches
the pod (a PodParseError with its own Event reason; a pod without annotations is never checked)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.pods.parse import PodParseError, parse_pod
from agent.pods.sources import default_sources
from agent.pods.sources.limitrange import LimitRanges
from agent.pods.sources.limitrange_rules import Violation, check_pod, parse_all, parse_limit_range

RESIZE = "kube-cgroup-agent.io/resize"
POD_RESOURCES = "kube-cgroup-agent.io/pod-resources"


def ctr(name: str, req: dict[str, str] | None = None, lim: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if req:
        res["requests"] = req
    if lim:
        res["limits"] = lim
    return {"name": name, "image": "x", "resources": res, **extra}


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), annotations: dict[str, str] | None = None,
        resources: dict[str, Any] | None = None, namespace: str = "shop") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if resources is not None:
        spec["resources"] = resources
    return {
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": namespace, "uid": "u-1", "annotations": dict(annotations or {})},
        "spec": spec,
    }


def limit_range(name: str, *items: dict[str, Any], namespace: str = "shop") -> dict[str, Any]:
    return {"kind": "LimitRange", "metadata": {"name": name, "namespace": namespace}, "spec": {"limits": list(items)}}


def item(scope: str, **rules: dict[str, str]) -> dict[str, Any]:
    return {"type": scope, **rules}


def found(raw_pod: dict[str, Any], *ranges: dict[str, Any]) -> list[tuple[Any, ...]]:
    """(LimitRange, scope, container, resource, rule, field, value, bound) of each violation."""
    got = check_pod(parse_pod(raw_pod), [parse_limit_range(r) for r in ranges])
    return [(v.limit_range, v.scope, v.container, v.resource, v.rule, v.field, v.value, v.bound) for v in got]


APP_1CPU = ctr("app", {"cpu": "500m", "memory": "128Mi"}, {"cpu": "1", "memory": "256Mi"})
MAX_CPU = item("Container", max={"cpu": "800m"})


@pytest.mark.parametrize(
    ("raw_pod", "ranges", "expected"),
    [
        pytest.param(pod(APP_1CPU), [], [], id="no LimitRange: nothing to break"),
        pytest.param(pod(APP_1CPU), [limit_range("lr", item("Container", max={"cpu": "1", "memory": "256Mi"}))], [],
                     id="max: at the bound is within it"),
        pytest.param(pod(APP_1CPU), [limit_range("lr", MAX_CPU)],
                     [("shop/lr", "Container", "app", "cpu", "max", "limit", "1", "800m")], id="max: limit above"),
        pytest.param(pod(ctr("app", {"cpu": "900m"}, {"cpu": "800m"})), [limit_range("lr", MAX_CPU)],
                     [("shop/lr", "Container", "app", "cpu", "max", "request", "900m", "800m")], id="max: request above"),
        pytest.param(pod(ctr("app", {"cpu": "100m"})), [limit_range("lr", MAX_CPU)],
                     [("shop/lr", "Container", "app", "cpu", "max", "limit", None, "800m")], id="max: no limit at all"),
        pytest.param(pod(APP_1CPU), [limit_range("lr", item("Container", min={"memory": "256Mi"}))],
                     [("shop/lr", "Container", "app", "memory", "min", "request", "128Mi", "256Mi")], id="min: request below"),
        pytest.param(pod(ctr("app", {"memory": "300Mi"}, {"memory": "200Mi"})), [limit_range("lr", item("Container", min={"memory": "256Mi"}))],
                     [("shop/lr", "Container", "app", "memory", "min", "limit", "200Mi", "256Mi")], id="min: limit below"),
        pytest.param(pod(ctr("app", lim={"cpu": "1"})), [limit_range("lr", item("Container", min={"memory": "1Mi"}))],
                     [("shop/lr", "Container", "app", "memory", "min", "request", None, "1Mi")], id="min: no request"),
        pytest.param(pod(ctr("app", lim={"cpu": "1"})), [limit_range("lr", item("Container", min={"cpu": "1"}))], [],
                     id="min: a limit alone defaults the request to it"),
        pytest.param(pod(APP_1CPU), [limit_range("lr", item("Container", maxLimitRequestRatio={"cpu": "2"}))], [],
                     id="ratio: exactly the bound"),
        pytest.param(pod(APP_1CPU), [limit_range("lr", item("Container", maxLimitRequestRatio={"cpu": "1500m"}))],
                     [("shop/lr", "Container", "app", "cpu", "maxLimitRequestRatio", "limit/request", "2", "1500m")], id="ratio: above"),
        pytest.param(pod(ctr("app", {"memory": "100Mi"})), [limit_range("lr", item("Container", maxLimitRequestRatio={"memory": "2"}))],
                     [("shop/lr", "Container", "app", "memory", "maxLimitRequestRatio", "limit/request", None, "2")], id="ratio: no limit"),
        pytest.param(pod(ctr("app", {"cpu": "0"}, {"cpu": "1"})), [limit_range("lr", item("Container", maxLimitRequestRatio={"cpu": "4"}))],
                     [("shop/lr", "Container", "app", "cpu", "maxLimitRequestRatio", "limit/request", None, "4")], id="ratio: a zero request"),
        pytest.param(pod(APP_1CPU, init=(ctr("setup", {"cpu": "2"}, {"cpu": "2"}),)), [limit_range("lr", item("Container", max={"cpu": "1"}))],
                     [("shop/lr", "Container", "setup", "cpu", "max", "limit", "2", "1")], id="container rules cover init containers"),
        pytest.param(pod(ctr("a", lim={"cpu": "300m"}), ctr("b", lim={"cpu": "300m"})), [limit_range("lr", item("Pod", max={"cpu": "500m"}))],
                     [("shop/lr", "Pod", None, "cpu", "max", "limit", "600m", "500m")], id="pod: containers summed"),
        pytest.param(pod(ctr("a", lim={"cpu": "200m"}), init=(ctr("setup", lim={"cpu": "1"}),)), [limit_range("lr", item("Pod", max={"cpu": "800m"}))],
                     [("shop/lr", "Pod", None, "cpu", "max", "limit", "1", "800m")], id="pod: an init container is a floor, not a summand"),
        pytest.param(pod(ctr("a", lim={"cpu": "200m"}), init=(ctr("log", lim={"cpu": "400m"}, restartPolicy="Always"),)),
                     [limit_range("lr", item("Pod", max={"cpu": "500m"}))],
                     [("shop/lr", "Pod", None, "cpu", "max", "limit", "600m", "500m")], id="pod: a sidecar runs beside, summed"),
        pytest.param(pod(ctr("a", {"cpu": "100m"}, {"cpu": "1"}), ctr("b", {"cpu": "100m"})), [limit_range("lr", item("Pod", max={"cpu": "2"}))], [],
                     id="pod: a limit named by one container is the pod's (as LimitRanger sums)"),
        pytest.param(pod(ctr("a", {"cpu": "100m"}, {"cpu": "300m"}), ctr("b", {"cpu": "100m"}, {"cpu": "300m"}), resources={"limits": {"cpu": "500m"}}),
                     [limit_range("lr", item("Pod", max={"cpu": "500m"}))], [], id="pod: pod-level resources replace the sum"),
        pytest.param(pod(ctr("a", {"cpu": "100m"}, {"cpu": "300m"}), ctr("b", {"cpu": "100m"}, {"cpu": "300m"}), resources={"limits": {"cpu": "500m"}}),
                     [limit_range("lr", item("Pod", min={"cpu": "250m"}))],
                     [("shop/lr", "Pod", None, "cpu", "min", "request", "200m", "250m")], id="pod: the pod-level request defaulted from the containers"),
        pytest.param(pod(ctr("a", {"memory": "64Mi"}), ctr("b", {"memory": "64Mi"})), [limit_range("lr", item("Pod", min={"memory": "256Mi"}))],
                     [("shop/lr", "Pod", None, "memory", "min", "request", "128Mi", "256Mi")], id="pod: min on the sum"),
        pytest.param(pod(ctr("a", {"cpu": "100m"}, {"cpu": "1"}), ctr("b", {"cpu": "100m"}, {"cpu": "1"})),
                     [limit_range("lr", item("Pod", maxLimitRequestRatio={"cpu": "5"}))],
                     [("shop/lr", "Pod", None, "cpu", "maxLimitRequestRatio", "limit/request", "10", "5")], id="pod: ratio of the sums"),
        pytest.param(pod(ctr("a", {"hugepages-2Mi": "4Mi", "memory": "1Gi"}, {"hugepages-2Mi": "4Mi", "memory": "1Gi"})),
                     [limit_range("lr", item("Container", max={"hugepages-2Mi": "2Mi"}))],
                     [("shop/lr", "Container", "a", "hugepages-2Mi", "max", "limit", "4Mi", "2Mi")], id="hugepages"),
        pytest.param(pod(APP_1CPU), [limit_range("cpu", MAX_CPU), limit_range("mem", item("Container", max={"memory": "128Mi"}))],
                     [("shop/cpu", "Container", "app", "cpu", "max", "limit", "1", "800m"),
                      ("shop/mem", "Container", "app", "memory", "max", "limit", "256Mi", "128Mi")], id="several LimitRanges all apply"),
        pytest.param(pod(APP_1CPU), [limit_range("lr", item("PersistentVolumeClaim", max={"storage": "1Gi"}),
                                                  item("Container", max={"ephemeral-storage": "1Mi"}, default={"cpu": "9"}))], [],
                     id="other types, unhandled resources and defaults are not checked"),
    ],
)
def test_limitranger_rules(raw_pod: dict[str, Any], ranges: list[dict[str, Any]], expected: list[tuple[Any, ...]]) -> None:
    assert found(raw_pod, *ranges) == expected


def test_a_violation_reads_as_one_line_with_its_context() -> None:
    v = Violation("shop/web", "shop/lr", "Container", "app", "cpu", "max", "limit", "1", "800m")
    assert v.message == "LimitRange shop/lr: cpu maximum per Container is 800m, but container app has limit 1"
    none = Violation("shop/web", "shop/lr", "Pod", None, "memory", "maxLimitRequestRatio", "limit/request", None, "2")
    assert none.message == "LimitRange shop/lr: memory limit/request ratio per Pod is at most 2, but the pod has no non-zero request and limit"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"limits": "x"}, id="limits not a list"),
        pytest.param({"limits": [{"max": {"cpu": "1"}}]}, id="an item without type"),
        pytest.param({"limits": [{"type": "Container", "max": ["cpu"]}]}, id="max not a map"),
        pytest.param({"limits": [{"type": "Container", "max": {"cpu": "lots"}}]}, id="not a quantity"),
        pytest.param({"limits": [{"type": "Container", "min": {"memory": "-1"}}]}, id="negative"),
        pytest.param({"limits": [{"type": "Container", "max": {"hugepages-0": "1Mi"}}]}, id="a zero page size"),
    ],
)
def test_a_malformed_limitrange_is_left_out_with_a_problem_and_the_others_apply(bad: dict[str, Any]) -> None:
    objects = [{"kind": "LimitRange", "metadata": {"name": "broken", "namespace": "shop"}, "spec": bad},
               limit_range("good", MAX_CPU)]
    by_ns, problems = parse_all(objects)
    assert [lr.name for lr in by_ns["shop"]] == ["good"]
    [problem] = problems
    assert problem.startswith("LimitRange shop/broken: ") and "other LimitRanges still apply" in problem


def test_only_the_namespaces_where_annotations_are_honoured_are_kept() -> None:
    by_ns, _ = parse_all([limit_range("a", MAX_CPU), limit_range("b", MAX_CPU, namespace="other")], frozenset({"shop"}))
    assert set(by_ns) == {"shop"}


# ---- through the annotation sources -------------------------------------------------------------------


def _annotated(cpu_limit: str, namespace: str = "shop") -> dict[str, Any]:
    return pod(ctr("app", {"cpu": "100m"}, {"cpu": "200m"}), namespace=namespace,
               annotations={RESIZE: json.dumps({"containers": {"app": {"limits": {"cpu": cpu_limit}}}})})


def _sources(ranges: LimitRanges) -> Any:
    return default_sources(None, ranges)


def test_an_annotation_within_the_bound_is_applied() -> None:
    ranges = LimitRanges(parse_all([limit_range("lr", MAX_CPU)])[0])
    view = parse_pod(_annotated("800m"), _sources(ranges))
    assert view.containers[0].limits.cpu_milli == 800
    assert view.provenance == {"containers/app/limits/cpu": "resize-annotation"}


def test_an_annotation_above_the_bound_refuses_the_pod_with_its_own_reason() -> None:
    ranges = LimitRanges(parse_all([limit_range("lr", MAX_CPU)])[0])
    with pytest.raises(PodParseError) as err:
        parse_pod(_annotated("900m"), _sources(ranges))
    assert err.value.reason == "LimitRangeExceeded"
    assert err.value.message == (
        "refused: with its annotations the pod breaks its namespace's LimitRange: "
        "LimitRange shop/lr: cpu maximum per Container is 800m, but container app has limit 900m"
    )


def test_the_pod_level_annotation_is_bounded_too() -> None:
    ranges = LimitRanges(parse_all([limit_range("lr", item("Pod", max={"memory": "1Gi"}))])[0])
    raw = pod(ctr("app", {"memory": "100Mi"}), annotations={POD_RESOURCES: json.dumps({"limits": {"memory": "2Gi"}})})
    with pytest.raises(PodParseError, match="LimitRange shop/lr: memory maximum per Pod is 1Gi, but the pod has limit 2Gi"):
        parse_pod(raw, _sources(ranges))


def test_a_pod_without_annotations_is_not_checked() -> None:
    """Its spec passed the API server's admission; a LimitRange created later does not apply to it there either."""
    ranges = LimitRanges(parse_all([limit_range("lr", item("Container", max={"cpu": "1m"}))])[0])
    assert parse_pod(pod(APP_1CPU), _sources(ranges)).containers[0].limits.cpu_milli == 1000


def test_other_namespaces_limitranges_do_not_apply() -> None:
    ranges = LimitRanges(parse_all([limit_range("lr", MAX_CPU, namespace="other")])[0])
    assert parse_pod(_annotated("2"), _sources(ranges)).containers[0].limits.cpu_milli == 2000


def test_while_the_limitranges_are_unknown_or_unreadable_an_annotation_is_refused() -> None:
    ranges = LimitRanges.unknown()
    assert not ranges.settled.is_set()
    with pytest.raises(PodParseError, match=r"cannot be checked against namespace shop's LimitRanges \(they are not listed yet\)"):
        parse_pod(_annotated("100m"), _sources(ranges))
    assert ranges.unavailable("403 Forbidden")
    assert ranges.settled.is_set()
    with pytest.raises(PodParseError, match=r"\(they cannot be read: 403 Forbidden\)"):
        parse_pod(_annotated("100m"), _sources(ranges))
    assert parse_pod(pod(APP_1CPU), _sources(ranges)).provenance == {}  # no annotation: not concerned
    assert ranges.replace({}) is None  # from nothing known to known: every namespace changed
    assert parse_pod(_annotated("100m"), _sources(ranges)).containers[0].limits.cpu_milli == 100


def test_replace_names_the_namespaces_that_changed_and_a_later_failure_keeps_the_last_known() -> None:
    ranges = LimitRanges({})
    first = parse_all([limit_range("lr", MAX_CPU)])[0]
    assert ranges.replace(first) == frozenset({"shop"})
    assert ranges.replace(first) == frozenset()
    assert ranges.replace_objects([limit_range("lr", MAX_CPU), limit_range("x", MAX_CPU, namespace="b")])[0] == frozenset({"b"})
    assert not ranges.unavailable("connection refused")  # the last listed ones stay in force
    assert [lr.name for lr in ranges.of("shop")] == ["lr"]


# ---- the CLI: LimitRanges read from the same input as the pods ---------------------------------------


def _diff(tmp_path: Any, files: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    from agent.commands.main import main

    pods = tmp_path / "input"
    pods.mkdir()
    for name, doc in files.items():
        (pods / name).write_text(json.dumps(doc))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"pods: {pods}\ncgroupfs: {tmp_path}\ncgroupVersion: '1'\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "memory").mkdir()
    code = main(["diff", "--config", str(cfg), "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_cli_bounds_annotations_by_the_limitranges_of_its_input(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl get limitranges -A -o json` (a LimitRangeList) beside the pods: the pod is refused as the daemon would."""
    listed = {"kind": "LimitRangeList", "apiVersion": "v1", "items": [{k: v for k, v in limit_range("lr", MAX_CPU).items() if k != "kind"}]}
    code, out = _diff(tmp_path, {"a-limits.json": listed, "b-pods.json": {"kind": "List", "items": [_annotated("900m")]}}, capsys)
    assert code == 2
    assert out["errors"] == [{"pod": "shop/web", "message": (
        "refused: with its annotations the pod breaks its namespace's LimitRange: "
        "LimitRange shop/lr: cpu maximum per Container is 800m, but container app has limit 900m")}]


def test_the_cli_leaves_a_malformed_limitrange_out_with_a_warning(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    broken = limit_range("broken", item("Container", max={"cpu": "lots"}))
    code, out = _diff(tmp_path, {"input.json": {"kind": "List", "items": [broken, _annotated("900m")]}}, capsys)
    assert code != 2 and out["errors"] == []  # the pod is computed: the broken LimitRange does not block
    assert [w["message"] for w in out["warnings"] if "LimitRange" in w["message"]] == [
        "LimitRange shop/broken: spec.limits[0].max cpu: 'lots' is not a valid quantity (left out: the namespace's other LimitRanges still apply)"
    ]
