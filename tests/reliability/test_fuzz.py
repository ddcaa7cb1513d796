"""Hostile and broken input never ends in a traceback: for any Pod object, annotation, quantity, config
file, trace line or cgroup file content, the answer is a value or the project's one typed error (one
line for the user, exit 2 from the CLI). Hypothesis explores; each property names what it allows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent.commands.main import main
from agent.config.settings import ConfigError, from_mapping
from agent.core.compute import ComputeConfig, PodComputeError, compute_pod
from agent.core.model import UNLIMITED
from agent.cri.convert import parse_verbose_info, values_from_linux
from agent.cri.v1 import api_pb2 as pb
from agent.infra.errors import AgentError, user_message
from agent.pods.parse import PodParseError, parse_pod
from agent.recommender.counters import parse_v1, parse_v2
from agent.recommender.trace import parse_line
from cgroupfs import layout

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
QUANTITY = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"-?[0-9]{0,20}(\.[0-9]{0,12})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]{1,3})?", fullmatch=True),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)
RESOURCES = st.dictionaries(
    st.sampled_from(["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi", "ephemeral-storage", "nvidia.com/gpu", "bogus"]),
    QUANTITY,
    max_size=4,
)
CONTAINER = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=8)},
    optional={
        "resources": st.fixed_dictionaries({}, optional={"requests": RESOURCES, "limits": RESOURCES}) | JSON,
        "restartPolicy": st.sampled_from(["Always", "Never", ""]) | JSON,
        "resizePolicy": JSON,
    },
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(["kube-cgroup-agent.io/resize", "kube-cgroup-agent.io/pod-resources", "other"]),
    st.text(max_size=40) | JSON.map(json.dumps),
    max_size=2,
)
POD = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=8), "uid": st.from_regex(r"[a-z0-9-]{1,40}", fullmatch=True) | st.text(max_size=10)},
            optional={"namespace": st.text(max_size=8), "annotations": ANNOTATIONS, "ownerReferences": JSON, "labels": JSON},
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(CONTAINER, min_size=0, max_size=3)},
            optional={"initContainers": st.lists(CONTAINER, max_size=2), "overhead": RESOURCES, "resources": JSON},
        ),
    },
    optional={"status": JSON, "kind": st.sampled_from(["Pod", "Deployment"])},
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.one_of(POD, JSON))
def test_any_object_is_a_pod_or_one_parse_error(raw: Any) -> None:
    try:
        pod = parse_pod(raw)
    except PodParseError as err:
        line = user_message(err)
        assert line and "\n" not in line
        return
    try:
        compute_pod(pod, ComputeConfig())
    except PodComputeError as err:
        line = user_message(err)
        assert err.message and line and "\n" not in line


@FUZZ
@given(st.dictionaries(st.sampled_from(["cgroupRoot", "cgroupDriver", "qosReserved", "allocatable", "cpuCFSQuotaPeriod",
                                        "featureGates", "ownership", "evictionHard", "recommender", "resyncPeriod",
                                        "annotationNamespaces", "enforceNodeAllocatable", "hugepageSizes", "bogus"]),
                      JSON | QUANTITY, max_size=5))
@example(raw={"allocatable": {"\n": None}})  # a resource name with a newline: once two lines
def test_any_config_is_settings_or_one_config_error(raw: dict[str, Any]) -> None:
    try:
        from_mapping(raw)
    except ConfigError as err:
        assert err.problems and all("\n" not in p for p in err.problems)


@FUZZ
@given(st.text(max_size=200) | JSON.map(json.dumps))
def test_any_trace_line_is_a_sample_or_one_error(text: str) -> None:
    try:
        parse_line(text)
    except ValueError as err:
        assert "\n" not in str(err)


@FUZZ
@given(st.sampled_from(sorted({layout.CPU_SHARES, layout.CPU_QUOTA, layout.CPU_PERIOD, layout.MEMORY_LIMIT,
                               layout.MEMORY_MAX, layout.CPU_MAX, layout.CPU_WEIGHT, layout.MEMORY_LOW,
                               layout.MEMORY_SOFT})),
       st.text(max_size=60) | st.binary(max_size=60).map(lambda b: b.decode("latin-1")))
def test_any_cgroup_file_content_is_canonical_or_refused(filename: str, text: str) -> None:
    try:
        out = layout.canonical(filename, text)
    except ValueError:
        return
    assert isinstance(out, str)


@FUZZ
@given(st.dictionaries(st.sampled_from(["cpuacct.usage", "cpu.stat", "memory.usage_in_bytes", "memory.stat",
                                        "memory.max_usage_in_bytes", "memory.oom_control", "memory.current",
                                        "memory.peak", "memory.events"]),
                       st.none() | st.text(max_size=80), max_size=9))
def test_any_counter_file_parses_to_counters(files: dict[str, str | None]) -> None:
    for counters in (parse_v1(files), parse_v2(files)):
        assert all(v is None or isinstance(v, int) for v in (counters.cpu_usage_ns, counters.memory_usage, counters.oom_kills))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(POD, max_size=3))
def test_the_cli_answers_any_manifest_with_a_result_or_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], pods: list[Any]) -> None:
    manifest = tmp_path / "pods.json"
    manifest.write_text(json.dumps({"kind": "List", "items": pods}))
    (tmp_path / "cpu").mkdir(exist_ok=True)
    (tmp_path / "memory").mkdir(exist_ok=True)
    try:
        code = main(["diff", "--pods", str(manifest), "--cgroupfs", str(tmp_path), "--cgroup-version", "1", "-o", "json"])
    except AgentError as err:  # pragma: no cover - main turns these into one line
        raise AssertionError(f"an AgentError escaped main: {err}") from err
    out = capsys.readouterr()
    assert code in (0, 1, 2)
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    if out.out:
        json.loads(out.out)  # the JSON contract holds whatever the input


@FUZZ
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=60) | JSON.map(json.dumps), max_size=3))
def test_any_verbose_container_status_gives_a_path_and_pid_or_none(info: dict[str, str]) -> None:
    """What a broken or hostile runtime puts in ContainerStatus.info: never a crash, never a non-string
    path or a non-positive pid."""
    path, pid = parse_verbose_info(info)
    assert path is None or (isinstance(path, str) and path)
    assert pid is None or (isinstance(pid, int) and pid > 0)


@FUZZ
@given(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.lists(st.text(max_size=8), max_size=2),
)
def test_any_runtime_reported_resources_convert_or_give_one_typed_error(
    period: int, quota: int, shares: int, memory: int, page_sizes: list[str]
) -> None:
    """A status's resources: zero or negative limits read as unlimited; a page size the agent cannot
    read is a ValueError naming it, which the client's one caller (container_status) reports as the
    typed InvalidResponse."""
    res = pb.LinuxContainerResources(
        cpu_period=period,
        cpu_quota=quota,
        cpu_shares=shares,
        memory_limit_in_bytes=memory,
        hugepage_limits=[pb.HugepageLimit(page_size=p, limit=1) for p in page_sizes],
    )
    try:
        values = values_from_linux(res)
    except ValueError as err:
        assert "hugepage size" in str(err)
        return
    assert values.cpu_quota == (quota if quota > 0 else UNLIMITED)
    assert values.memory_limit == (memory if memory > 0 else UNLIMITED)
    assert (values.cpu_period, values.cpu_shares) == (period, shares)
