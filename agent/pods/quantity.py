"""Kubernetes quantities through the kubernetes client's own parser, with the API server's rounding.

`kubernetes.utils.parse_quantity` lives in a package whose `__init__` imports the whole generated
client (about 0.2 s). The parser module itself only needs `decimal`, so it is loaded on its own from
the installed package; the CLI then stays fast and still parses exactly as the client does.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from decimal import Decimal
from functools import cache, lru_cache
from pathlib import Path
from typing import TypeVar

from agent.infra.errors import PermanentError

_Parser = Callable[[object], Decimal]
_T = TypeVar("_T")


@cache
def _parser() -> _Parser:
    spec = importlib.util.find_spec("kubernetes")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "quantity.py"
        mod_spec = importlib.util.spec_from_file_location("_kcg_k8s_quantity", path)
        if mod_spec is not None and mod_spec.loader is not None and path.is_file():
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
            parse: _Parser = module.parse_quantity
            return parse
    from kubernetes.utils import parse_quantity  # the slow but certain way

    fallback: _Parser = parse_quantity
    return fallback


class QuantityError(PermanentError, ValueError):
    pass


class _Refused(PermanentError, ValueError):
    """Why a value is not an admitted quantity, for `parse` to say of what."""


def parse(value: object, what: str) -> Decimal:
    """Parse a quantity (string or number); negative values are refused as the API refuses them."""
    return _checked(value, what, _admitted)


def to_milli(value: object, what: str) -> int:
    """Millicores, rounded up as the API server rounds (SetDefaults_ResourceList)."""
    return _checked(value, what, _milli)


def to_int(value: object, what: str) -> int:
    """Whole units (bytes), rounded up as Quantity.Value() does."""
    return _checked(value, what, _whole)


def _checked(value: object, what: str, convert: Callable[[str | int | float], _T]) -> _T:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{what}: {value!r} is not a quantity")
    try:
        return convert(value)
    except _Refused as err:
        raise QuantityError(f"{what}: {value!r} {err}") from err.__cause__


# A node's manifests repeat a few dozen quantities thousands of times: each is parsed once. The results are
# immutable; `typed` keeps 1, 1.0 and "1" apart, as the parser does.
@lru_cache(maxsize=1024, typed=True)
def _admitted(value: str | int | float) -> Decimal:
    try:
        q = _parser()(value)
    except (ValueError, ArithmeticError) as err:
        raise _Refused("is not a valid quantity") from err
    if not q.is_finite():
        raise _Refused("is not a finite quantity")
    if q < 0:
        raise _Refused("must not be negative")
    return q


@lru_cache(maxsize=1024, typed=True)
def _milli(value: str | int | float) -> int:
    return math.ceil(_admitted(value) * 1000)


@lru_cache(maxsize=1024, typed=True)
def _whole(value: str | int | float) -> int:
    return math.ceil(_admitted(value))


def parse_any(value: object) -> Decimal:
    """A quantity as the client parses it, negative ones included (for comparing values, not admitting
    them); ValueError when it is none."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a quantity")
    try:
        return _parser()(value)
    except ArithmeticError as err:
        raise ValueError(f"{value!r} is not a quantity") from err
