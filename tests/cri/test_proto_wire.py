"""Our api.proto subset is wire-compatible with the CRI: names and numbers as in cri-api (anchors §3)."""

from __future__ import annotations

import pytest

from agent.cri.v1 import api_pb2

# (message, field) -> number, from kubernetes/cri-api pkg/apis/runtime/v1/api.proto.
CRI_FIELDS: dict[tuple[str, str], int] = {
    ("VersionRequest", "version"): 1,
    ("VersionResponse", "runtime_api_version"): 4,
    ("PodSandboxMetadata", "uid"): 2,
    ("PodSandboxMetadata", "attempt"): 4,
    ("PodSandboxFilter", "label_selector"): 3,
    ("PodSandbox", "labels"): 5,
    ("PodSandbox", "runtime_handler"): 7,
    ("PodSandboxStatus", "labels"): 7,
    ("PodSandboxStatus", "runtime_handler"): 9,
    ("PodSandboxStatusResponse", "containers_statuses"): 3,
    ("LinuxContainerResources", "cpu_period"): 1,
    ("LinuxContainerResources", "cpu_quota"): 2,
    ("LinuxContainerResources", "cpu_shares"): 3,
    ("LinuxContainerResources", "memory_limit_in_bytes"): 4,
    ("LinuxContainerResources", "oom_score_adj"): 5,
    ("LinuxContainerResources", "hugepage_limits"): 8,
    ("LinuxContainerResources", "unified"): 9,
    ("LinuxContainerResources", "memory_swap_limit_in_bytes"): 10,
    ("HugepageLimit", "page_size"): 1,
    ("HugepageLimit", "limit"): 2,
    ("ContainerFilter", "pod_sandbox_id"): 3,
    ("ContainerFilter", "label_selector"): 4,
    ("Container", "metadata"): 3,
    ("Container", "state"): 6,
    ("Container", "labels"): 8,
    ("ContainerStatus", "labels"): 12,
    ("ContainerStatus", "log_path"): 15,
    ("ContainerStatus", "resources"): 16,
    ("UpdateContainerResourcesRequest", "linux"): 2,
    ("UpdateContainerResourcesRequest", "annotations"): 4,
    ("UpdatePodSandboxResourcesRequest", "overhead"): 2,
    ("UpdatePodSandboxResourcesRequest", "resources"): 3,
    ("StopContainerRequest", "timeout"): 2,
    ("LinuxPodSandboxConfig", "cgroup_parent"): 1,
    ("LinuxPodSandboxConfig", "resources"): 5,
    ("PodSandboxConfig", "log_directory"): 3,
    ("PodSandboxConfig", "labels"): 6,
    ("PodSandboxConfig", "linux"): 8,
    ("ContainerConfig", "log_path"): 11,
    ("ContainerConfig", "linux"): 15,
    ("CreateContainerRequest", "sandbox_config"): 3,
    ("ExecSyncRequest", "timeout"): 3,
    ("ExecSyncResponse", "exit_code"): 3,
}


@pytest.mark.parametrize(
    ("message", "field"), [pytest.param(*key, id=".".join(key)) for key in sorted(CRI_FIELDS)]
)
def test_field_number_matches_the_cri(message: str, field: str) -> None:
    descriptor = api_pb2.DESCRIPTOR.message_types_by_name[message]
    assert descriptor.full_name == f"runtime.v1.{message}"
    assert descriptor.fields_by_name[field].number == CRI_FIELDS[(message, field)]


def test_enum_values_match_the_cri() -> None:
    assert api_pb2.CONTAINER_RUNNING == 1 and api_pb2.CONTAINER_UNKNOWN == 3
    assert api_pb2.SANDBOX_NOTREADY == 1
    assert (api_pb2.POD, api_pb2.CONTAINER, api_pb2.NODE) == (0, 1, 2)


def test_no_field_number_is_used_twice_in_any_message() -> None:
    for descriptor in api_pb2.DESCRIPTOR.message_types_by_name.values():
        numbers = [f.number for f in descriptor.fields]
        assert len(numbers) == len(set(numbers)), descriptor.full_name
