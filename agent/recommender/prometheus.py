"""A container's usage history from Prometheus, as VPA's recommender reads it with `--storage=prometheus`
(kubernetes/autoscaler vertical-pod-autoscaler/pkg/recommender/input/history/history_provider.go,
GetClusterHistory): two range queries over `historyLength` at a step of `historyResolution`,

    rate(container_cpu_usage_seconds_total{job="kubernetes-cadvisor", pod_name=~".+", name!="POD", name!=""}[1h])
    container_memory_working_set_bytes{job="kubernetes-cadvisor", pod_name=~".+", name!="POD", name!=""}

each point a usage sample (CPU in cores, memory in bytes) at its own time, every container's samples sorted
by time and fed to the model as the node's own are. VPA reads no OOM from Prometheus (only the pods' labels,
from `--metric-for-pod-labels`, which a node has from its own pods).

One difference: VPA reads every pod of the cluster once, at start; a node reads only the containers it has no
history of, so `pod_name=~".+"` becomes the alternation of their pods and a namespace matcher the
alternation of their namespaces (VPA's `--vpa-object-namespace` adds `namespace="..."` in the same place).
A series of a pod or container the node does not run is ignored. (VPA fails the whole load on a series
without the three labels; these matchers let none through, and one would be ignored here too.)

Beyond VPA, the pod level: a pod that sets pod-level resources is one more key, (namespace/pod, POD), whose
history is its pod cgroup's. The kubelet's cAdvisor names the pod cgroup's series by its pod and no
container (the container label empty, hence absent in Prometheus, with VPA's `name` as with `container`) and
no image; containerd's sandbox has no container name either, but the pause image (dockershim's and CRI-O's is
"POD"). So for a batch holding POD keys, each query is the union (`or`) of VPA's with the same selector over
those pods' own cgroups (`container=""`, `image=""`): a series with an empty container label is the pod
level's only when its pod's POD key is wanted.

Pure: the query text, the response's parsing (bounded by `maxSeries`; the body by `maxBytes`, which the HTTP
shell enforces), the mapping of a series to the sampler's key (namespace/pod, container) and the histories
the samples make. `agent.recommender.history` is the shell that asks and applies."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from agent.core.model import POD
from agent.infra.errors import PermanentError
from agent.recommender.config import PrometheusSettings, RecommenderSettings, prometheus_duration
from agent.recommender.model import ContainerHistory
from agent.recommender.state import Key, RecommenderState
from agent.recommender.trace import Sample

_REGEX_SPECIAL: Final = frozenset("\\.+*?()|[]{}^$")
IMAGE_LABEL: Final = "image"
"""The kubelet's cAdvisor label of a container's image (no VPA flag renames it): empty on the pod cgroup, the
pause image on containerd's sandbox, which tells them apart (a Prometheus that drops it cannot)."""


class HistoryError(PermanentError):
    """Why a load gave no history, in one line (the log's reason); not retried: the container's history is
    then the node's own."""


@dataclass(frozen=True, slots=True)
class RangeQuery:
    """One `/api/v1/query_range` request (times in UNIX seconds)."""

    resource: Literal["cpu", "memory"]
    query: str
    start: float
    end: float
    step_s: float

    def form(self, timeout_s: float | None = None) -> dict[str, str]:
        """The request's form fields; `timeout` also bounds the query's evaluation in Prometheus."""
        out = {"query": self.query, "start": _seconds(self.start), "end": _seconds(self.end),
               "step": _seconds(self.step_s)}
        if timeout_s is not None:
            out["timeout"] = _seconds(max(timeout_s, 0.001))
        return out


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a matrix: its labels and its (time, value) points, in the response's order."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


def _seconds(t: float) -> str:
    return f"{t:.3f}".rstrip("0").rstrip(".")


def _regex_literal(text: str) -> str:
    """`text` matched literally by an RE2 regular expression."""
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text)


def _string(text: str) -> str:
    """A PromQL double-quoted string of `text`."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _alternation(values: Iterable[str]) -> str:
    return _string("|".join(_regex_literal(v) for v in sorted(set(values))))


def selector(settings: PrometheusSettings, keys: Collection[Key], *, pod_cgroups: bool = False) -> str:
    """VPA's series selector (history_provider.go GetClusterHistory's podSelector), narrowed to the pods
    and namespaces of `keys`: `job="..."` (when a job name is set), the pod label, the container label
    neither `POD` nor empty, the namespace label. With `pod_cgroups`, the same pods' own cgroups instead:
    the container label and the image empty (containerd's sandbox has an image)."""
    namespaces, pods = [], []
    for pod, _ in keys:
        namespace, _, name = pod.partition("/")
        namespaces.append(namespace)
        pods.append(name)
    container = settings.container_name_label
    parts = [f"job={_string(settings.cadvisor_job_name)}"] if settings.cadvisor_job_name else []
    parts.append(f"{settings.container_pod_name_label}=~{_alternation(pods)}")
    parts += [f'{container}=""', f'{IMAGE_LABEL}=""'] if pod_cgroups else [f'{container}!="POD"', f'{container}!=""']
    parts.append(f"{settings.container_namespace_label}=~{_alternation(namespaces)}")
    return ", ".join(parts)


def history_queries(settings: PrometheusSettings, keys: Collection[Key], now: float) -> tuple[RangeQuery, RangeQuery]:
    """The CPU and memory range queries of VPA's history provider for `keys`, from now − historyLength to
    now at a step of historyResolution (readResourceHistory). POD keys add their pods' cgroups to each
    query by `or`, rather than a second pair of queries: still two requests, so `queryTimeout`, the
    batch's deadline (two of them), `maxSeries` and `maxBytes` bound a batch as before, and a batch
    without POD keys asks exactly VPA's. The operands never share a series (container label set / empty),
    so `or` keeps all of both; pods without a POD key are asked nothing more."""
    if not keys:
        raise ValueError("no containers to ask about")
    containers = [k for k in keys if k[1] != POD]
    pod_levels = [k for k in keys if k[1] == POD]
    selectors = ([selector(settings, containers)] if containers else []) + (
        [selector(settings, pod_levels, pod_cgroups=True)] if pod_levels else [])
    start, step = now - settings.history_length_s, settings.history_resolution_s
    window = prometheus_duration(step)
    cpu = " or ".join(f"rate({settings.history_cpu_metric}{{{sel}}}[{window}])" for sel in selectors)
    memory = " or ".join(f"{settings.history_memory_metric}{{{sel}}}" for sel in selectors)
    return RangeQuery("cpu", cpu, start, now, step), RangeQuery("memory", memory, start, now, step)


def _fail(why: str) -> HistoryError:
    return HistoryError(f"not a query_range matrix: {why}")


def parse_matrix(body: bytes, max_series: int) -> tuple[Series, ...]:
    """A `query_range` response's series; HistoryError for an error response, anything but a matrix, a
    malformed one, or more than `max_series` series."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise _fail(f"not JSON ({str(err)[:80]})") from None
    if not isinstance(doc, dict):
        raise _fail(f"a JSON {type(doc).__name__}")
    if doc.get("status") != "success":
        kind, error = doc.get("errorType"), doc.get("error")
        if isinstance(error, str) or isinstance(kind, str):
            raise HistoryError(f"Prometheus answered {kind or 'error'}: {str(error)[:200]}")
        raise _fail(f"status {str(doc.get('status'))[:40]!r}")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise _fail("no data")
    if data.get("resultType") != "matrix":
        raise _fail(f"resultType {str(data.get('resultType'))[:40]!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise _fail("result is not a list")
    if len(result) > max_series:
        raise HistoryError(f"{len(result)} series, more than maxSeries ({max_series})")
    out = []
    for i, item in enumerate(result):
        out.append(_series(item))
        result[i] = None  # the parsed JSON let go series by series: the peak is about one copy, not two
    return tuple(out)


def _series(item: Any) -> Series:
    if not isinstance(item, dict):
        raise _fail("a series is not an object")
    metric, values = item.get("metric"), item.get("values", [])
    if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        raise _fail("a series' metric is not a map of label names to strings")
    if not isinstance(values, list):
        raise _fail("a series' values are not a list")
    points = []
    for p in values:
        if (not isinstance(p, list) or len(p) != 2 or isinstance(p[0], bool) or not isinstance(p[0], int | float)
                or not isinstance(p[1], str)):
            raise _fail("a point is not [time, \"value\"]")
        try:
            value = float(p[1])
        except ValueError:
            raise _fail(f"a point's value {p[1][:40]!r} is not a number") from None
        points.append((float(p[0]), value))
    return Series(dict(metric), tuple(points))


def series_key(settings: PrometheusSettings, labels: Mapping[str, str]) -> Key | None:
    """The sampler's key of a series (namespace/pod, container), or (namespace/pod, POD) for the pod's own
    cgroup (no container label, no image: Prometheus keeps no empty label); None without the namespace and
    pod labels (VPA: getContainerIDFromLabels) or for a pod's sandbox ("POD", or no container but an image)."""
    namespace = labels.get(settings.container_namespace_label)
    pod = labels.get(settings.container_pod_name_label)
    container = labels.get(settings.container_name_label, "")
    if not namespace or not pod or container == "POD" or (container == POD and labels.get(IMAGE_LABEL)):
        return None
    return (f"{namespace}/{pod}", container)


def samples_by_key(settings: PrometheusSettings, cpu: Sequence[Series], memory: Sequence[Series],
            keys: Collection[Key]) -> dict[Key, list[Sample]]:
    """Each wanted key's samples, sorted by time (stable: at one time, the series in the response's order; a
    later CPU sample at the same time is then dropped by the model, as VPA's is). Series of other containers
    are ignored, and a pod cgroup's unless its POD key is wanted; a value that is not a finite, non-negative
    number is dropped by the model. Beyond VPA, a working set of 0 is left out: it is cAdvisor's first
    reading of a cgroup nothing is charged to yet (a new pod cgroup's, before its containers), not a use,
    and VPA's aggregation never replaces a peak of 0 within its interval (container.go addMemorySample:
    `oldMaxMem != 0`), so that one point would hide every later peak of the next 24 hours."""
    out: dict[Key, list[Sample]] = {}
    for resource, matrix in (("cpu", cpu), ("memory", memory)):
        for series in matrix:
            key = series_key(settings, series.labels)
            if key is None or key not in keys:
                continue
            pod, container = key
            into = out.setdefault(key, [])
            if resource == "cpu":
                into.extend(Sample(t, pod, container, cpu=v) for t, v in series.points)
            else:
                into.extend(Sample(t, pod, container, memory=v) for t, v in series.points if v != 0)
    for into in out.values():
        into.sort(key=lambda s: s.ts)
    return out


def observe(state: RecommenderState, by_key: Mapping[Key, Sequence[Sample]]) -> None:
    """Each container's samples into `state` as the node's own are fed (`RecommenderState.observe`). CPU and
    memory keep apart in the model: the CPU samples of every step, then the memory ones, make the same
    histories as both at each step."""
    for key in sorted(by_key):
        state.observe_all(by_key[key])


def found(state: RecommenderState) -> dict[Key, ContainerHistory]:
    """The histories with something in them: a container none of whose samples the model took has none."""
    return {k: h for k, h in state.histories.items() if not (h.cpu.is_empty() and h.memory.is_empty())}


def histories(settings: RecommenderSettings, by_key: Mapping[Key, Sequence[Sample]]) -> dict[Key, ContainerHistory]:
    """The histories the samples make (`observe` into an empty state, then `found`)."""
    state = RecommenderState(settings)
    observe(state, by_key)
    return found(state)
