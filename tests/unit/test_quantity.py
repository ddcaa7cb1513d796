"""Quantities are parsed once per distinct value: a repeated value gives the same answer, and a refusal
names each caller's field every time."""

from __future__ import annotations

import pytest

from agent.pods import quantity
from agent.pods.quantity import QuantityError

CASES = [
    ("100m", 100, 1),
    ("1", 1000, 1),
    (1, 1000, 1),
    (1.5, 1500, 2),
    ("1.5", 1500, 2),
    ("0.0001", 1, 1),
    ("64Mi", 67108864000, 67108864),
    ("1e3", 1000000, 1000),
    ("0", 0, 0),
]


@pytest.mark.parametrize(("value", "milli", "whole"), CASES, ids=[repr(c[0]) for c in CASES])
def test_a_repeated_quantity_gives_the_same_values(value: object, milli: int, whole: int) -> None:
    for _ in range(2):  # the second answer comes from the cache
        assert quantity.to_milli(value, "f") == milli
        assert quantity.to_int(value, "f") == whole
        assert quantity.parse(value, "f") == quantity.parse_any(value)


REFUSED = [
    ("lots", "is not a valid quantity"),
    ("-1", "must not be negative"),
    (-2, "must not be negative"),
    (float("inf"), "is not a finite quantity"),
    (float("nan"), "is not a finite quantity"),
    (True, "is not a quantity"),
    (None, "is not a quantity"),
    ([1], "is not a quantity"),
]


@pytest.mark.parametrize(("value", "why"), REFUSED, ids=[repr(c[0]) for c in REFUSED])
def test_a_refused_quantity_names_each_callers_field_every_time(value: object, why: str) -> None:
    for what in ("first.cpu", "second.memory", "first.cpu"):
        for convert in (quantity.parse, quantity.to_milli, quantity.to_int):
            with pytest.raises(QuantityError) as err:
                convert(value, what)
            assert str(err.value) == f"{what}: {value!r} {why}"


def test_a_repeated_resource_list_gives_equal_resources_and_refusals_name_each_caller() -> None:
    from agent.pods.parse import resource_list

    raw = {"cpu": "250m", "memory": "64Mi", "hugepages-2Mi": "4Mi", "example.com/gpu": "1"}
    first, again = resource_list(raw, "a"), resource_list(dict(raw), "b")
    assert first == again
    assert (first.cpu_milli, first.memory, dict(first.hugepages), first.other) == (
        250, 64 << 20, {2 << 20: 4 << 20}, frozenset({"example.com/gpu"})
    )
    assert resource_list({"cpu": 1}, "a").cpu_milli == 1000
    for what in ("first limits", "second limits"):  # True is not 1, whatever came before
        with pytest.raises(QuantityError, match=f"^{what}.cpu: True is not a quantity$"):
            resource_list({"cpu": True}, what)
        with pytest.raises(QuantityError, match=f"^{what}.memory: 'lots' is not a valid quantity$"):
            resource_list({"cpu": "1", "memory": "lots"}, what)
