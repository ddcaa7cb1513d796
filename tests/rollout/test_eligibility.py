"""Seed 004's eligibility rule, table-driven: only `spec.containers[*].image` differs (same number of
containers, the rest semantically equal) → in place; anything else → Recreate; the two switchable
extensions (template metadata, container resources)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.pods.quantity import parse_any as Q
from agent.rollout.eligibility import Kind, Options, classify, normalized, template_of


def _template(**over: Any) -> dict[str, Any]:
    t: dict[str, Any] = {
        "metadata": {"labels": {"app": "db"}},
        "spec": {
            "containers": [
                {"name": "db", "image": "db:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}, "env": []},
                {"name": "proxy", "image": "proxy:1"},
            ],
            "terminationGracePeriodSeconds": 30,
        },
    }
    for path, value in over.items():
        target = t
        *parents, last = path.split("__")
        for k in parents:
            target = target[int(k)] if isinstance(target, list) else target[k]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return t


def _with(**over: Any) -> dict[str, Any]:
    return _template(**over)


CASES = [
    # (what, update, options, kind, images)
    ("one sidecar image", _with(spec__containers__1__image="proxy:2"), Options(), Kind.IN_PLACE, {"proxy": "proxy:2"}),
    ("both images", _with(spec__containers__0__image="db:2", spec__containers__1__image="proxy:2"), Options(), Kind.IN_PLACE,
     {"db": "db:2", "proxy": "proxy:2"}),
    ("nothing", _template(), Options(), Kind.NONE, {}),
    # Semantic.DeepEqual: 1000m == 1, 1024Mi == 1Gi, an empty env list == none
    ("equal quantities, empty list dropped", _with(spec__containers__0__resources={"requests": {"cpu": "1000m", "memory": "1024Mi"}},
                                                   spec__containers__0__env=None), Options(), Kind.NONE, {}),
    ("an env change", _with(spec__containers__0__env=[{"name": "A", "value": "1"}]), Options(), Kind.RECREATE, {}),
    ("an init container added", _with(spec__initContainers=[{"name": "init", "image": "i:2"}]), Options(), Kind.RECREATE, {}),
    ("image + a template label", _with(spec__containers__1__image="proxy:2", metadata={"labels": {"app": "db", "tier": "x"}}),
     Options(), Kind.RECREATE, {}),
    ("image + a template label, metadata on", _with(spec__containers__1__image="proxy:2", metadata={"labels": {"app": "db", "tier": "x"}}),
     Options(metadata_in_place=True), Kind.IN_PLACE, {"proxy": "proxy:2"}),
    ("image + env", _with(spec__containers__1__image="proxy:2", spec__containers__0__env=[{"name": "A", "value": "1"}]),
     Options(), Kind.RECREATE, {}),
    ("containers reordered", _with(spec__containers=[{"name": "proxy", "image": "proxy:1"},
                                                     {"name": "db", "image": "db:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]),
     Options(), Kind.RECREATE, {}),
    ("resources, off", _with(spec__containers__0__resources={"requests": {"cpu": "2", "memory": "1Gi"}}), Options(), Kind.RECREATE, {}),
    ("resources, on", _with(spec__containers__0__resources={"requests": {"cpu": "2", "memory": "1Gi"}}),
     Options(resources_in_place=True), Kind.IN_PLACE, {}),
    ("a template label, off", _with(metadata={"labels": {"app": "db", "tier": "x"}}), Options(), Kind.RECREATE, {}),
    ("a template label, on", _with(metadata={"labels": {"app": "db", "tier": "x"}}), Options(metadata_in_place=True), Kind.IN_PLACE, {}),
    ("the grace period", _with(spec__terminationGracePeriodSeconds=5), Options(), Kind.RECREATE, {}),
]


@pytest.mark.parametrize(("what", "update", "opts", "kind", "images"), CASES, ids=[c[0] for c in CASES])
def test_classify(what: str, update: dict[str, Any], opts: Options, kind: Kind, images: dict[str, str]) -> None:
    current = _template()
    before = copy.deepcopy(current)
    change = classify(current, update, Q, opts)
    assert change.kind is kind, change.reason
    assert dict(change.images) == images
    assert current == before  # the inputs are not touched


def test_an_init_container_image_change_is_recreate() -> None:
    # the seed compares only spec.containers' images; an init container's image is "anything else"
    current = _template()
    current["spec"]["initContainers"] = [{"name": "init", "image": "i:1"}]
    update = copy.deepcopy(current)
    update["spec"]["initContainers"][0]["image"] = "i:2"
    change = classify(current, update, Q)
    assert change.kind is Kind.RECREATE and change.reason.startswith("spec.initContainers[0].image differs")


def test_a_container_added_is_recreate_with_the_reason() -> None:
    update = _template()
    update["spec"]["containers"].append({"name": "log", "image": "log:1"})
    change = classify(_template(), update, Q)
    assert change.kind is Kind.RECREATE and change.reason == "the number of containers changed (2 → 3)"


def test_the_reason_names_the_first_difference() -> None:
    change = classify(_template(), _with(spec__containers__0__env=[{"name": "A", "value": "1"}], spec__containers__1__image="proxy:2"), Q)
    assert change.kind is Kind.RECREATE and change.reason.startswith("spec.containers[0].env differs")


def test_resources_and_labels_together_carry_what_to_patch() -> None:
    update = _with(spec__containers__0__resources={"requests": {"cpu": "2"}}, metadata={"labels": {"tier": "x"}})
    change = classify(_template(), update, Q, Options(metadata_in_place=True, resources_in_place=True))
    assert change.kind is Kind.IN_PLACE
    assert dict(change.resources) == {"db": {"requests": {"cpu": "2"}}}
    assert dict(change.labels) == {"tier": "x", "app": None}  # app removed, tier added


def test_normalized_keeps_what_matters() -> None:
    assert normalized({"a": [], "b": {}, "c": None, "d": 0, "e": False}, Q) == {"d": 0, "e": False}
    assert normalized({"resources": {"limits": {"cpu": "500m"}}}, Q) == normalized({"resources": {"limits": {"cpu": "0.5"}}}, Q)
    assert normalized({"image": "1"}, Q) != normalized({"image": "1.0"}, Q)
    assert normalized({"resources": {"limits": {"cpu": "lots"}}}, Q) == {"resources": {"limits": {"cpu": "lots"}}}  # only quantities compare by value


def test_the_template_of_a_controller_revision() -> None:
    rev = {"data": {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}}}
    assert template_of(rev) == {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}
    assert template_of({"data": {}}) is None and template_of({}) is None and template_of({"data": "x"}) is None
