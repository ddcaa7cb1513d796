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
from functools import cache
from pathlib import Path

from agent.errors import PermanentError

_Parser = Callable[[object], Decimal]


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


def parse(value: object, what: str) -> Decimal:
    """Parse a quantity (string or number); negative values are refused as the API refuses them."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{what}: {value!r} is not a quantity")
    try:
        q = _parser()(value)
    except (ValueError, ArithmeticError) as err:
        raise QuantityError(f"{what}: {value!r} is not a valid quantity") from err
    if not q.is_finite():
        raise QuantityError(f"{what}: {value!r} is not a finite quantity")
    if q < 0:
        raise QuantityError(f"{what}: {value!r} must not be negative")
    return q


def to_milli(value: object, what: str) -> int:
    """Millicores, rounded up as the API server rounds (SetDefaults_ResourceList)."""
    return math.ceil(parse(value, what) * 1000)


def to_int(value: object, what: str) -> int:
    """Whole units (bytes), rounded up as Quantity.Value() does."""
    return math.ceil(parse(value, what))


def parse_any(value: object) -> Decimal:
    """A quantity as the client parses it, negative ones included (for comparing values, not admitting
    them); ValueError when it is none."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a quantity")
    try:
        return _parser()(value)
    except ArithmeticError as err:
        raise ValueError(f"{value!r} is not a quantity") from err
