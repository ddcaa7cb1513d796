"""Each config value's parser: from a YAML value or a flag's text to the type of its `Settings` field.

A value is accepted in both spellings a user meets (`memory=50%` on the command line, `{memory: 50%}` in the
file) and checked against what the kubelet accepts for the same knob; a ValueError names the problem in
one line, which `agent.config.settings` gathers with the key's name into one ConfigError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from agent.core.model import CPUWeightFormula, Resources
from agent.infra.durations import parse_duration_us
from cgroupfs.types import DriverKind


def parse_percent(text: str) -> int:
    m = re.fullmatch(r"(\d{1,3})%", text.strip())
    if not m or int(m.group(1)) > 100:
        raise ValueError(f"{text!r} is not a percentage between 0% and 100%")
    return int(m.group(1))


def parse_qos_reserved(value: object) -> int | None:
    """`memory=50%` (flag) or `{memory: 50%}` (config); only memory is supported, as in the kubelet."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        pairs = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
        if not pairs and value:
            raise ValueError(f"qosReserved {value!r} must look like memory=50%")
        value = pairs
    if not isinstance(value, Mapping):
        raise ValueError("qosReserved must be a map like {memory: 50%}")
    unknown = set(value) - {"memory"}
    if unknown:
        raise ValueError(f"qosReserved supports only memory, not {', '.join(sorted(map(repr, map(str, unknown))))}")
    return parse_percent(str(value["memory"])) if "memory" in value else None


def parse_allocatable(value: object) -> Resources:
    """`cpu=8,memory=32Gi,hugepages-2Mi=1Gi` (flag) or a map (config)."""
    from agent.pods.parse import resource_list

    if isinstance(value, str):
        value = dict(p.split("=", 1) for p in value.split(",") if p)
    if not isinstance(value, Mapping):
        raise ValueError("allocatable must be a map or cpu=..,memory=..")
    return resource_list(value, "allocatable")


def parse_hugepage_sizes(value: object) -> tuple[int, ...]:
    from agent.pods import quantity

    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, list):
        raise ValueError("hugepageSizes must be a list like [2Mi, 1Gi]")
    return tuple(sorted(quantity.to_int(v, "hugepageSizes") for v in value))


def parse_bool(v: object) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"{v!r} is not true or false")


def parse_str(v: object) -> str:
    if not isinstance(v, str | int) or isinstance(v, bool):
        raise ValueError(f"{v!r} is not a string")
    return str(v)


def parse_formula(v: object) -> CPUWeightFormula:
    try:
        return CPUWeightFormula(str(v))
    except ValueError:
        raise ValueError(f"{v!r} is not linear or quadratic") from None


def parse_driver(v: object) -> DriverKind:
    try:
        return DriverKind(str(v))
    except ValueError:
        raise ValueError(f"{v!r} is not cgroupfs or systemd") from None


def parse_cgroup_version(v: object) -> str:
    if str(v) not in ("auto", "1", "2"):
        raise ValueError(f"{v!r} is not auto, 1 or 2")
    return str(v)


def parse_cpu_manager_policy(v: object) -> str:
    if str(v) not in ("none", "static"):
        raise ValueError(f"{v!r} is not none or static")
    return str(v)


def parse_cfs_period(v: object) -> int:
    us = parse_duration_us(str(v))
    if not 1000 <= us <= 1_000_000:
        raise ValueError(f"{v!r} must be between 1ms and 1s")
    return us


def parse_seconds(v: object) -> float:
    """A duration ("60s", "200ms") or a number of seconds."""
    if isinstance(v, str):
        return parse_duration_us(v) / 1_000_000
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{v!r} is not a duration like 60s")
    return float(v)


def parse_ownership(v: object) -> Mapping[str, str]:
    if not isinstance(v, Mapping):
        raise ValueError("ownership must be a map")
    allowed_keys = {"qosReservedMemory", "podLevelLimits", "containerResizes", "qosTiers", "podCgroups"}
    allowed_values = {"auto", "agent", "kubelet", "observe"}
    for k, val in v.items():
        if k not in allowed_keys:
            raise ValueError(f"ownership key {k!r} is unknown (known: {', '.join(sorted(allowed_keys))})")
        if val not in allowed_values:
            raise ValueError(f"ownership {k}: {val!r} is not one of {', '.join(sorted(allowed_values))}")
    return {str(k): str(val) for k, val in v.items()}


def parse_bind_address(v: object) -> str:
    """host:port; the daemon binds only there (127.0.0.1 unless configured)."""
    text = parse_str(v)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not host:port, e.g. 127.0.0.1:9812")
    return text


def parse_feature_gates(v: object) -> Mapping[str, bool]:
    if not isinstance(v, Mapping):
        raise ValueError("featureGates must be a map of gate name to true/false")
    return {str(k): parse_bool(val) for k, val in v.items()}


def parse_eviction_hard(v: object) -> str:
    """evictionHard as the kubelet writes it ({memory.available: 100Mi}); only memory matters here."""
    if not isinstance(v, Mapping):
        raise ValueError("evictionHard must be a map like {memory.available: 100Mi}")
    value = v.get("memory.available", "100Mi")
    text = parse_str(value)
    if text.endswith("%"):
        parse_percent(text)
    else:
        from agent.pods import quantity

        quantity.to_int(text, "evictionHard memory.available")
    return text


def parse_positive_int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{v!r} is not a positive integer")
    return v


def parse_positive_float(v: object) -> float:
    """A positive number (an int or a float; a rate such as apiQPS)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"{v!r} is not a positive number")
    return float(v)


def parse_kubelet_version(v: object) -> str:
    text = parse_str(v)
    if not re.fullmatch(r"v?\d+\.\d+(\.\d+)?([-+].*)?", text):
        raise ValueError(f"{text!r} is not a version like v1.33.2")
    return text


def parse_enforce_node_allocatable(v: object) -> tuple[str, ...]:
    """enforceNodeAllocatable as the kubelet takes it: a list of pods, system-reserved, kube-reserved, none."""
    allowed = {
        "pods",
        "system-reserved",
        "kube-reserved",
        "system-reserved-compressible",
        "kube-reserved-compressible",
        "none",
    }
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError("enforceNodeAllocatable must be a list like [pods]")
    unknown = sorted(set(v) - allowed)
    if unknown:
        raise ValueError(f"enforceNodeAllocatable: unknown {', '.join(unknown)}")
    return tuple(x for x in v if x != "none")


def parse_namespaces(v: object) -> frozenset[str] | None:
    """A list of namespace names; ["*"] means every namespace, [] none."""
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ValueError("annotationNamespaces must be a list of namespace names (or [\"*\"])")
    return None if "*" in v else frozenset(v)


class Choice:
    """A parser of one of a few words; `allowed` is what the configuration reference shows as its type."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = allowed

    def __call__(self, v: object) -> str:
        if str(v) not in self.allowed:
            raise ValueError(f"{v!r} is not one of {', '.join(self.allowed)}")
        return str(v)


def choice(*allowed: str) -> Choice:
    return Choice(*allowed)
