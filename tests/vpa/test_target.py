"""The target label: the one value the keeper writes on a VPA and a node computes from its pods' owner
chains must agree, differ by namespace, kind and name, fit a label value, and make a set selector."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent.daemon.vpa_admission import unlabelled
from agent.vpa.target import DIGITS, TARGET_LABEL, label_of, selector, target_value, wanted_value

LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # the API server's rule


def _vpa(ns: Any = "shop", kind: Any = "Deployment", name: Any = "web", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "v", "namespace": ns, "labels": labels or {}}, "spec": {"targetRef": {"kind": kind, "name": name}}}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("shop", "Deployment", "web"), ("other", "Deployment", "web")),  # another tenant's web
        (("shop", "Deployment", "web"), ("shop", "StatefulSet", "web")),
        (("shop", "Deployment", "web"), ("shop", "Deployment", "web2")),
        (("shop", "Deployment", "web"), ("shop", "ReplicaSet", "web")),
    ],
)
def test_different_targets_get_different_values(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    assert target_value(*a) != target_value(*b)


@pytest.mark.parametrize("name", ["web", "x" * 253, "a.b-c"])
def test_a_value_is_a_valid_label_value_of_fixed_length(name: str) -> None:
    value = target_value("ns", "Deployment", name)
    assert len(value) == DIGITS and LABEL_VALUE.match(value)
    assert value == target_value("ns", "Deployment", name)  # the keeper and every node compute the same


@pytest.mark.parametrize(
    ("vpa", "expected"),
    [
        (_vpa(), target_value("shop", "Deployment", "web")),
        (_vpa(kind=None), None),
        (_vpa(name=""), None),
        (_vpa(ns=None), None),
        ({"metadata": {"namespace": "shop"}}, None),
        ({"metadata": {"namespace": "shop"}, "spec": {"targetRef": "web"}}, None),
    ],
    ids=["deployment", "no-kind", "empty-name", "no-namespace", "no-spec", "ref-not-a-map"],
)
def test_the_value_a_vpa_should_carry(vpa: dict[str, Any], expected: str | None) -> None:
    assert wanted_value(vpa) == expected


def test_the_selector_is_one_sorted_set_without_repeats_or_none() -> None:
    assert selector([]) is None
    assert selector(["b", "a", "b"]) == f"{TARGET_LABEL} in (a,b)"


def test_the_keeper_labels_only_vpas_whose_label_is_missing_or_stale() -> None:
    right = target_value("shop", "Deployment", "web")
    vpas = [
        _vpa(labels={TARGET_LABEL: right}),  # as it should be
        _vpa(name="api"),  # missing
        _vpa(name="db", labels={TARGET_LABEL: right}),  # stale: its targetRef moved to db
        _vpa(kind=None),  # unreadable targetRef: left alone
    ]
    todo = unlabelled(vpas)
    assert [(label_of(v), value) for v, value in todo] == [
        (None, target_value("shop", "Deployment", "api")),
        (right, target_value("shop", "Deployment", "db")),
    ]
