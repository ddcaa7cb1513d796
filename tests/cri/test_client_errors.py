"""CRIClient's errors: UNAVAILABLE retried with a bounded back-off, every other status code mapped to its
error class without retry, and runc's refusals (returned as UNKNOWN) classified by their message."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from agent.core.model import UNLIMITED, ContainerValues
from agent.cri import errors
from agent.cri.client import CRIClient, RetryPolicy
from agent.cri.v1 import api_pb2 as pb
from tests.cri.client_support import UID, Sleeps
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fake_cri.state import FakeContainer, Refuse

P = "/sys/fs/cgroup/cpu/kubepods/burstable/pod" + UID + "/0a1b2c3d4e5f"


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
