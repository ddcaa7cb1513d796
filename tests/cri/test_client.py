"""CRIClient against the in-process fake runtime: every call, every error class, containerd's merge rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agent.core.model import UNLIMITED, ContainerID, ContainerValues, HugepageLimit
from agent.cri import errors
from agent.cri.channel import RetryPolicy
from agent.cri.client import CRIClient
from agent.cri.convert import linux_from_values, parse_verbose_info, values_from_linux
from agent.cri.endpoint import NoRuntimeSocket, autodetect_endpoint, normalize_endpoint, socket_path
from agent.cri.lookup import find_pod_containers
from agent.cri.types import ContainerState
from agent.cri.v1 import api_pb2 as pb
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fake_cri.state import FakeContainer, Refuse

UID = "4c3b2a19-0817-4f6e-9d5c-4b3a29180704"
OTHER_UID = "6f1c1a4e-0b7d-4f43-9a55-1d2e3f4a5b01"
WRAP = (
    "failed to update resources: failed to update resources: "
    "runc did not terminate successfully: exit status 1: {}\n: unknown"
)
P = "/sys/fs/cgroup/cpu/kubepods/burstable/pod" + UID + "/0a1b2c3d4e5f"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(fake_cri: FakeCRI, sleeps: Sleeps) -> Iterator[CRIClient]:
    with CRIClient(fake_cri.endpoint, timeout=5.0, sleep=sleeps) as c:
        yield c


@pytest.fixture
def app(fake_cri: FakeCRI) -> FakeContainer:
    sandbox = fake_cri.service.add_sandbox(UID, "web", "shop")
    return fake_cri.service.add_container(
        sandbox,
        "app",
        resources=pb.LinuxContainerResources(
            cpu_period=100000, cpu_quota=50000, cpu_shares=512, memory_limit_in_bytes=128 << 20
        ),
    )


# ---- the calls ----


def test_version_sends_the_kubelet_api_version_and_reads_the_runtime(
    client: CRIClient, fake_cri: FakeCRI
) -> None:
    v = client.version()
    assert (v.runtime_name, v.runtime_api_version) == ("fake-containerd", "v1")
    assert fake_cri.service.calls_of("Version")[0].request == {"version": "0.1.0"}


def test_list_sandboxes_filters_by_pod_uid(client: CRIClient, fake_cri: FakeCRI) -> None:
    mine = fake_cri.service.add_sandbox(UID, "web", "shop")
    fake_cri.service.add_sandbox(OTHER_UID, "db", "shop", ready=False)
    assert {s.pod_uid for s in client.list_sandboxes()} == {UID, OTHER_UID}
    (only,) = client.list_sandboxes(pod_uid=UID)
    assert (only.id, only.name, only.namespace, only.ready) == (mine.id, "web", "shop", True)
    (other,) = client.list_sandboxes(pod_uid=OTHER_UID)
    assert other.ready is False


def test_list_containers_by_pod_uid_uses_the_kubelet_label(client: CRIClient, fake_cri: FakeCRI) -> None:
    s1 = fake_cri.service.add_sandbox(UID)
    s2 = fake_cri.service.add_sandbox(OTHER_UID)
    a = fake_cri.service.add_container(s1, "app")
    fake_cri.service.add_container(s2, "db")
    (found,) = client.list_containers(pod_uid=UID)
    assert (found.id, found.name, found.pod_uid, found.sandbox_id) == (a.id, "app", UID, s1.id)
    assert found.state is ContainerState.RUNNING
    req = fake_cri.service.calls_of("ListContainers")[-1].request
    assert req["filter"]["label_selector"] == {"io.kubernetes.pod.uid": UID}


def test_list_containers_by_sandbox(client: CRIClient, fake_cri: FakeCRI) -> None:
    s1 = fake_cri.service.add_sandbox(UID)
    s2 = fake_cri.service.add_sandbox(UID, attempt=1)
    fake_cri.service.add_container(s1, "app", state=pb.CONTAINER_EXITED)
    b = fake_cri.service.add_container(s2, "app", attempt=1)
    assert [c.id for c in client.list_containers(sandbox_id=s2.id)] == [b.id]
    assert len(client.list_containers()) == 2


def test_container_without_kubelet_labels_has_no_pod_uid(client: CRIClient, fake_cri: FakeCRI) -> None:
    s = fake_cri.service.add_sandbox(UID)
    fake_cri.service.add_container(s, "sidecar", kubelet_labels=False)
    (c,) = client.list_containers()
    assert c.pod_uid is None and c.name == "sidecar"


def test_container_status_reads_the_stored_resources(client: CRIClient, app: FakeContainer) -> None:
    st = client.container_status(app.id)
    assert st.id == app.id and st.name == "app" and st.state is ContainerState.RUNNING
    assert st.resources == ContainerValues(
        cpu_shares=512, cpu_quota=50000, cpu_period=100000, memory_limit=128 << 20
    )
    assert st.cgroups_path is None  # only in verbose info


def test_verbose_container_status_carries_cgroups_path_and_pid(client: CRIClient, app: FakeContainer) -> None:
    st = client.container_status(app.id, verbose=True)
    assert st.cgroups_path == f"/kubepods/burstable/pod{UID}/{app.id}"
    assert st.pid == app.pid


def test_best_effort_status_reads_unset_limits_as_unlimited(client: CRIClient, fake_cri: FakeCRI) -> None:
    s = fake_cri.service.add_sandbox(UID)
    c = fake_cri.service.add_container(s, "be", resources=pb.LinuxContainerResources(cpu_shares=2))
    st = client.container_status(c.id)
    assert st.resources == ContainerValues(
        cpu_shares=2, cpu_quota=UNLIMITED, cpu_period=0, memory_limit=UNLIMITED
    )


def test_update_sends_every_field_and_the_runtime_stores_them(
    client: CRIClient, fake_cri: FakeCRI, app: FakeContainer
) -> None:
    values = ContainerValues(
        cpu_shares=1024,
        cpu_quota=150000,
        cpu_period=50000,
        memory_limit=256 << 20,
        hugepage_limits=(HugepageLimit(2 << 20, 4 << 20),),
    )
    client.update_container_resources(app.id, values)
    sent = fake_cri.service.calls_of("UpdateContainerResources")[0].request
    assert sent["linux"]["hugepage_limits"] == [{"page_size": "2MB", "limit": str(4 << 20)}]
    assert client.container_status(app.id).resources == values


def test_unlimited_cpu_quota_is_sent_as_minus_one_not_zero(
    client: CRIClient, fake_cri: FakeCRI, app: FakeContainer
) -> None:
    client.update_container_resources(
        app.id,
        ContainerValues(cpu_shares=512, cpu_quota=UNLIMITED, cpu_period=100000, memory_limit=128 << 20),
    )
    assert fake_cri.service.containers[app.id].resources.cpu_quota == -1  # 0 would have kept 50000
    assert client.container_status(app.id).resources.cpu_quota == UNLIMITED  # type: ignore[union-attr]


def test_zero_fields_leave_the_runtime_values_unchanged(
    client: CRIClient, fake_cri: FakeCRI, app: FakeContainer
) -> None:
    client.update_container_resources(
        app.id, ContainerValues(cpu_shares=0, cpu_quota=20000, cpu_period=0, memory_limit=64 << 20)
    )
    stored = fake_cri.service.containers[app.id].resources
    assert (stored.cpu_shares, stored.cpu_period) == (512, 100000)  # unchanged
    assert (stored.cpu_quota, stored.memory_limit_in_bytes) == (20000, 64 << 20)


def test_update_pod_sandbox_resources_is_false_when_unimplemented(
    client: CRIClient, fake_cri: FakeCRI
) -> None:
    s = fake_cri.service.add_sandbox(UID)
    values = ContainerValues(cpu_shares=1024, cpu_quota=100000, cpu_period=100000, memory_limit=1 << 30)
    assert client.update_pod_sandbox_resources(s.id, None, values) is False
    assert fake_cri.service.sandboxes[s.id].resources is None


def test_update_pod_sandbox_resources_is_true_when_the_runtime_implements_it(
    client: CRIClient, fake_cri: FakeCRI
) -> None:
    fake_cri.service.pod_resources_implemented = True
    s = fake_cri.service.add_sandbox(UID)
    overhead = ContainerValues(cpu_shares=10, cpu_quota=UNLIMITED, cpu_period=100000, memory_limit=UNLIMITED)
    values = ContainerValues(cpu_shares=1024, cpu_quota=100000, cpu_period=100000, memory_limit=1 << 30)
    assert client.update_pod_sandbox_resources(s.id, overhead, values) is True
    stored = fake_cri.service.sandboxes[s.id]
    assert stored.resources is not None and stored.resources.memory_limit_in_bytes == 1 << 30
    assert stored.overhead is not None and stored.overhead.cpu_shares == 10


def test_stop_container_passes_the_grace_period(
    client: CRIClient, fake_cri: FakeCRI, app: FakeContainer
) -> None:
    client.stop_container(app.id, timeout_s=3)
    assert fake_cri.service.calls_of("StopContainer")[0].request == {"container_id": app.id, "timeout": "3"}
    assert client.container_status(app.id).state is ContainerState.EXITED


# ---- errors ----


def test_unavailable_is_retried_with_backoff_then_succeeds(
    client: CRIClient, fake_cri: FakeCRI, sleeps: Sleeps
) -> None:
    fake_cri.service.inject_error("Version", grpc.StatusCode.UNAVAILABLE, "restarting", times=2)
    assert client.version().runtime_name == "fake-containerd"
    fake_cri.service.assert_calls(["Version"] * 3)
    assert sleeps == [0.05, 0.1]


def test_unavailable_is_raised_after_the_bounded_attempts(fake_cri: FakeCRI, sleeps: Sleeps) -> None:
    fake_cri.service.inject_error("ListContainers", grpc.StatusCode.UNAVAILABLE, "down", times=10)
    c = CRIClient(fake_cri.endpoint, retry=RetryPolicy(attempts=3), sleep=sleeps)
    with c, pytest.raises(errors.Unavailable) as info:
        c.list_containers()
    assert len(fake_cri.service.calls_of("ListContainers")) == 3
    assert len(sleeps) == 2
    assert info.value.temporary and str(fake_cri.socket) in str(info.value)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        pytest.param(grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded, id="deadline"),
        pytest.param(grpc.StatusCode.NOT_FOUND, errors.NotFound, id="not-found"),
        pytest.param(grpc.StatusCode.UNIMPLEMENTED, errors.Unimplemented, id="unimplemented"),
        pytest.param(grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgument, id="invalid-argument"),
        pytest.param(grpc.StatusCode.INTERNAL, errors.RuntimeFailure, id="internal"),
    ],
)
def test_status_codes_map_to_error_classes_without_retry(
    client: CRIClient,
    fake_cri: FakeCRI,
    app: FakeContainer,
    sleeps: Sleeps,
    code: grpc.StatusCode,
    error: type[errors.CRIError],
) -> None:
    fake_cri.service.inject_error("UpdateContainerResources", code, "nope")
    values = ContainerValues(cpu_shares=2, cpu_quota=UNLIMITED, cpu_period=100000, memory_limit=UNLIMITED)
    with pytest.raises(error) as info:
        client.update_container_resources(app.id, values)
    assert type(info.value) is error
    assert (info.value.method, info.value.code, info.value.container_id) == (
        "UpdateContainerResources",
        code.name,
        app.id,
    )
    assert sleeps == [] and len(fake_cri.service.calls_of("UpdateContainerResources")) == 1


def test_real_deadline_exceeded_from_a_slow_runtime(fake_cri: FakeCRI, app: FakeContainer) -> None:
    import threading

    release = threading.Event()
    fake_cri.service.on_update = lambda _c, _r: release.wait(10) and None  # type: ignore[func-returns-value]
    c = CRIClient(fake_cri.endpoint, timeout=0.2, update_timeout=0.2)
    values = ContainerValues(cpu_shares=2, cpu_quota=UNLIMITED, cpu_period=100000, memory_limit=UNLIMITED)
    with c, pytest.raises(errors.DeadlineExceeded):
        c.update_container_resources(app.id, values)
    release.set()


def test_unknown_container_is_not_found(client: CRIClient) -> None:
    with pytest.raises(errors.NotFound) as info:
        client.container_status("ab" * 32)
    assert info.value.container_id == "ab" * 32


@pytest.mark.parametrize(
    ("runc_message", "error", "attrs"),
    [
        pytest.param(
            "unable to set memory limit to 16777216 (current usage: 42459136, peak usage: 43888640)",
            errors.MemoryBelowUsage,
            {"limit": 16777216, "usage": 42459136, "peak": 43888640, "file": "memory.limit_in_bytes"},
            id="memory-below-usage",
        ),
        pytest.param(
            f'failed to write "500": write {P}/cpu.cfs_quota_us: invalid argument',
            errors.QuotaRefused,
            {"file": "cpu.cfs_quota_us", "value": "500"},
            id="quota-below-1ms",
        ),
        pytest.param(
            f'failed to write "90000": write {P}/cpu.cfs_quota_us: invalid argument',
            errors.QuotaRefused,
            {"file": "cpu.cfs_quota_us", "value": "90000"},
            id="quota-above-parent",
        ),
        pytest.param(
            f'failed to write "2000000": write {P}/cpu.cfs_period_us: invalid argument',
            errors.PeriodRefused,
            {"file": "cpu.cfs_period_us", "value": "2000000"},
            id="period",
        ),
        pytest.param(
            "the minimum allowed cpu-shares is 2", errors.SharesRefused, {"file": "cpu.shares"}, id="shares"
        ),
        pytest.param(
            f'failed to write "-5": write {P}/memory.memsw.limit_in_bytes: invalid argument',
            errors.RuntimeFailure,
            {},
            id="memsw-generic",
        ),
        pytest.param(
            "invalid configuration: cannot use unified on cgroup v1",
            errors.RuntimeFailure,
            {},
            id="unified-on-v1",
        ),
    ],
)
def test_runc_refusals_returned_as_unknown_are_classified_by_message(
    client: CRIClient,
    fake_cri: FakeCRI,
    app: FakeContainer,
    runc_message: str,
    error: type[errors.CRIError],
    attrs: dict[str, object],
) -> None:
    def refuse(_c: FakeContainer, _r: pb.LinuxContainerResources) -> None:
        raise Refuse(runc_message)

    fake_cri.service.on_update = refuse
    values = ContainerValues(cpu_shares=512, cpu_quota=500, cpu_period=100000, memory_limit=16 << 20)
    with pytest.raises(errors.CRIError) as info:
        client.update_container_resources(app.id, values)
    assert type(info.value) is error and info.value.code == "UNKNOWN"
    assert isinstance(info.value, errors.RuntimeFailure) and info.value.runtime_message == runc_message
    for name, expected in attrs.items():
        assert getattr(info.value, name) == expected
    # the runtime keeps its previous spec after a refused update
    assert fake_cri.service.containers[app.id].resources.cpu_quota == 50000


def test_unreachable_socket_names_the_socket(tmp_path: Path, sleeps: Sleeps) -> None:
    sock = tmp_path / "missing.sock"
    c = CRIClient(f"unix://{sock}", timeout=1.0, sleep=sleeps)
    with c, pytest.raises(errors.Unavailable) as info:
        c.version()
    assert f"{sock} does not exist" in str(info.value)
    assert len(sleeps) == RetryPolicy().attempts - 1


# ---- endpoints ----


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
        ("unix:/run/crio/crio.sock", "/run/crio/crio.sock"),
        ("/var/run/cri-dockerd.sock", "/var/run/cri-dockerd.sock"),
        ("localhost:1234", None),
    ],
)
def test_socket_path_of_an_endpoint(endpoint: str, path: str | None) -> None:
    assert socket_path(endpoint) == path


def test_a_bare_path_endpoint_becomes_a_unix_target() -> None:
    assert normalize_endpoint("/run/x.sock") == "unix:///run/x.sock"
    assert normalize_endpoint("unix:///run/x.sock") == "unix:///run/x.sock"


def test_autodetect_picks_the_first_existing_socket(fake_cri: FakeCRI, tmp_path: Path) -> None:
    missing = f"unix://{tmp_path}/none.sock"
    not_a_socket = tmp_path / "plain"
    not_a_socket.write_text("")
    assert autodetect_endpoint([missing, f"unix://{not_a_socket}", fake_cri.endpoint]) == fake_cri.endpoint


def test_autodetect_without_any_socket_lists_what_it_tried(tmp_path: Path) -> None:
    tried = [f"unix://{tmp_path}/a.sock", f"unix://{tmp_path}/b.sock"]
    with pytest.raises(NoRuntimeSocket) as info:
        autodetect_endpoint(tried)
    assert all(t in str(info.value) for t in tried)


# ---- conversion and lookup ----


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
