"""Recorded usage traces: JSON lines, one sample per line, so a recommendation can be computed, replayed and
compared away from the node (`recommend --samples FILE`), and recorded from a live node (`--record FILE`).

    {"ts": 1764000000, "pod": "ns/name", "container": "c", "cpu": 0.250, "memory": 123456789}
    {"ts": 1764000060, "pod": "ns/name", "container": "c", "oom": true, "memory": 268435456}
    {"ts": 1764000000, "pod": "ns/name", "container": "c", "requests": {"cpu": "100m", "memory": "128Mi"}}

`cpu` is cores averaged over the interval since the container's previous line, `memory` the working set in
bytes. A line without `container` is the pod cgroup's, of a pod that sets pod-level resources (POD): the
usage of all its containers together, an OOM kill of any of them. An OOM line's `memory` is what the container used when it was killed: it counts as a memory sample,
then VPA's OOM rule adds max(used + minBumpUp, used × ratio) with used = max(its memory request — from the
latest request line —, the interval's peak).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from agent.core.model import POD
from agent.infra.errors import PermanentError


class TraceError(PermanentError):
    """A line of a trace that is not a sample; names the file and line."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}", source=source, line=line)
        self.source, self.line, self.message = source, line, message


class Sample(NamedTuple):
    """A NamedTuple for its cost: the sampler makes one per container each second (see `Counters`)."""

    ts: float
    pod: str
    container: str
    cpu: float | None = None  # cores
    memory: float | None = None  # bytes
    oom: bool = False
    request_cpu_milli: int | None = None
    request_memory: int | None = None

    def to_json(self) -> str:
        out: dict[str, Any] = {"ts": self.ts, "pod": self.pod}
        if self.container != POD:
            out["container"] = self.container
        if self.request_cpu_milli is not None or self.request_memory is not None:
            req: dict[str, str] = {}
            if self.request_cpu_milli is not None:
                req["cpu"] = f"{self.request_cpu_milli}m"
            if self.request_memory is not None:
                req["memory"] = str(self.request_memory)
            out["requests"] = req
        if self.oom:
            out["oom"] = True
        if self.cpu is not None:
            out["cpu"] = round(self.cpu, 6)
        if self.memory is not None:
            out["memory"] = int(self.memory)
        return json.dumps(out, separators=(",", ":"))


_KNOWN = {"ts", "pod", "container", "cpu", "memory", "oom", "requests"}


def _number(obj: dict[str, Any], key: str, what: str) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{key} must be a non-negative number ({what}), not {v!r}")
    return float(v)


def parse_line(text: str) -> Sample:
    from agent.pods import quantity

    try:
        obj = json.loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(obj, dict):
        raise ValueError("a sample must be a JSON object")
    unknown = sorted(set(obj) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown keys {unknown}")
    ts = _number(obj, "ts", "UNIX seconds")
    if ts is None:
        raise ValueError("ts is missing")
    pod, container = obj.get("pod"), obj.get("container", POD)
    if not isinstance(pod, str) or pod.count("/") != 1 or not all(pod.split("/")):
        raise ValueError(f"pod must be namespace/name, not {pod!r}")
    if not isinstance(container, str) or (not container and "container" in obj):
        raise ValueError(f"container must be a name (no container: the pod cgroup), not {container!r}")
    oom = obj.get("oom", False)
    if not isinstance(oom, bool):
        raise ValueError("oom must be true or false")
    cpu = _number(obj, "cpu", "cores")
    memory = _number(obj, "memory", "bytes")
    req_cpu = req_mem = None
    requests = obj.get("requests")
    if requests is not None:
        if not isinstance(requests, dict) or set(requests) - {"cpu", "memory"}:
            raise ValueError('requests must be {"cpu": QUANTITY, "memory": QUANTITY}')
        try:
            if "cpu" in requests:
                req_cpu = quantity.to_milli(str(requests["cpu"]), "requests.cpu")
            if "memory" in requests:
                req_mem = quantity.to_int(str(requests["memory"]), "requests.memory")
        except quantity.QuantityError as err:
            raise ValueError(str(err)) from None
    if oom and memory is None:
        raise ValueError("an OOM line needs memory (bytes used when the container was killed)")
    if cpu is None and memory is None and requests is None:
        raise ValueError("a line needs cpu, memory, oom or requests")
    return Sample(ts, pod, container, cpu, memory, oom, req_cpu, req_mem)


def read_trace(lines: Iterable[str], source: str) -> Iterator[Sample]:
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            yield parse_line(text)
        except ValueError as err:
            raise TraceError(source, n, str(err)) from None
