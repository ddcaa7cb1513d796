"""Between the agent and the wire: container values to and from LinuxContainerResources, a pod's containers
found by name (the newest attempt, or the ID its status reports), and the verbose status info parsed."""

from __future__ import annotations

import json

import pytest

from agent.core.model import UNLIMITED, ContainerID, ContainerValues, HugepageLimit
from agent.cri.client import CRIClient
from agent.cri.convert import linux_from_values, parse_verbose_info, values_from_linux
from agent.cri.lookup import find_pod_containers
from agent.cri.v1 import api_pb2 as pb
from tests.cri.client_support import OTHER_UID, UID
from tests.support.fake_cri.serving import FakeCRI


def test_linux_resources_round_trip_through_the_wire_form() -> None:
    values = ContainerValues(
        cpu_shares=256,
        cpu_quota=UNLIMITED,
        cpu_period=100000,
        memory_limit=UNLIMITED,
        hugepage_limits=(HugepageLimit(1 << 30, 0), HugepageLimit(2 << 20, 8 << 20)),
    )
    wire = linux_from_values(values)
    assert (wire.cpu_quota, wire.memory_limit_in_bytes) == (-1, -1)
    assert [h.page_size for h in wire.hugepage_limits] == ["1GB", "2MB"]
    assert values_from_linux(pb.LinuxContainerResources.FromString(wire.SerializeToString())) == values


def test_find_pod_containers_maps_names_to_the_newest_attempt(client: CRIClient, fake_cri: FakeCRI) -> None:
    s = fake_cri.service.add_sandbox(UID)
    fake_cri.service.add_container(s, "app", attempt=0, state=pb.CONTAINER_EXITED)
    newest = fake_cri.service.add_container(s, "app", attempt=2)
    fake_cri.service.add_container(s, "app", attempt=1, state=pb.CONTAINER_EXITED)
    side = fake_cri.service.add_container(s, "sidecar")
    other = fake_cri.service.add_sandbox(OTHER_UID)
    fake_cri.service.add_container(other, "app", attempt=5)
    found = find_pod_containers(client, UID)
    assert {name: c.id for name, c in found.items()} == {"app": newest.id, "sidecar": side.id}


def test_find_pod_containers_prefers_the_id_from_pod_status(client: CRIClient, fake_cri: FakeCRI) -> None:
    s = fake_cri.service.add_sandbox(UID)
    reported = fake_cri.service.add_container(s, "app", attempt=0)
    fake_cri.service.add_container(s, "app", attempt=1, state=pb.CONTAINER_CREATED)
    gone = ContainerID("cd" * 32)
    found = find_pod_containers(client, UID, {"app": ContainerID(reported.id)})
    assert found["app"].id == reported.id
    # an ID the runtime no longer has falls back to the newest attempt
    assert find_pod_containers(client, UID, {"app": gone})["app"].attempt == 1


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        pytest.param({}, (None, None), id="not-verbose"),
        pytest.param({"info": "not json"}, (None, None), id="not-json"),
        pytest.param({"info": json.dumps([1, 2])}, (None, None), id="not-an-object"),
        pytest.param(
            {
                "info": json.dumps(
                    {"pid": 42, "runtimeSpec": {"linux": {"cgroupsPath": "/kubepods/pod1/abc"}}}
                )
            },
            ("/kubepods/pod1/abc", 42),
            id="containerd",
        ),
        pytest.param({"info": json.dumps({"pid": True, "runtimeSpec": None})}, (None, None), id="odd-types"),
    ],
)
def test_parse_verbose_info(info: dict[str, str], expected: tuple[str | None, int | None]) -> None:
    assert parse_verbose_info(info) == expected
