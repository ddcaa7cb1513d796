"""Pure pieces of agent.cri: error classification, hugepage size strings, container cgroup paths."""

from __future__ import annotations

import pytest

from agent.cri import errors
from agent.cri.cgroup_paths import cgroups_path_to_dir, container_cgroup_dir, runtime_kind
from agent.cri.types import format_page_size, parse_page_size
from cgroupfs.types import DriverKind

CID = "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f"
WRAPPED = (
    "failed to update resources: failed to update resources: runc did not terminate successfully: "
    "exit status 1: {}\n: unknown"
)


@pytest.mark.parametrize(
    ("message", "error", "file"),
    [
        pytest.param(
            'failed to write "500 100000": write /x/cpu.max: invalid argument',
            errors.QuotaRefused,
            "cpu.max",
            id="v2-cpu-max",
        ),
        pytest.param(
            'failed to write "0": write /x/cpu.weight: numerical result out of range',
            errors.SharesRefused,
            "cpu.weight",
            id="v2-cpu-weight",
        ),
        pytest.param(
            "the maximum allowed cpu-shares is 262144", errors.SharesRefused, "cpu.shares", id="shares-max"
        ),
        pytest.param(
            'failed to write "99": write /x/cpuset.cpus: numerical result out of range',
            errors.RuntimeFailure,
            None,
            id="cpuset-generic",
        ),
    ],
)
def test_refusals_are_classified_wrapped_or_bare(
    message: str, error: type[errors.CRIError], file: str | None
) -> None:
    for text in (message, WRAPPED.format(message)):
        err = errors.classify("UpdateContainerResources", "UNKNOWN", text, CID)
        assert type(err) is error
        assert getattr(err, "file", None) == file
        assert isinstance(err, errors.RuntimeFailure) and err.runtime_message == message


def test_a_known_code_wins_over_the_message_text() -> None:
    text = "unable to set memory limit to 1 (current usage: 2, peak usage: 3)"
    assert type(errors.classify("X", "NOT_FOUND", text)) is errors.NotFound


def test_error_text_names_method_container_and_code() -> None:
    err = errors.classify("UpdateContainerResources", "UNKNOWN", WRAPPED.format("boom"), CID)
    assert (
        str(err)
        == f"CRI UpdateContainerResources for container {CID} failed (UNKNOWN): {WRAPPED.format('boom')}"
    )


def test_only_transient_errors_are_temporary() -> None:
    temporary = {
        cls for cls in (errors.Unavailable, errors.DeadlineExceeded, errors.MemoryBelowUsage) if cls.temporary
    }
    assert temporary == {errors.Unavailable, errors.DeadlineExceeded, errors.MemoryBelowUsage}
    assert not errors.NotFound.temporary and not errors.QuotaRefused.temporary


@pytest.mark.parametrize(
    ("size", "text"), [(4096, "4KB"), (2 << 20, "2MB"), (1 << 30, "1GB"), (16 << 30, "16GB"), (512, "512B")]
)
def test_page_size_strings_as_the_kubelet_writes_them(size: int, text: str) -> None:
    assert format_page_size(size) == text
    assert parse_page_size(text) == size


@pytest.mark.parametrize("bad", ["2M", "MB", "2 MB", "-2MB", ""])
def test_malformed_page_size_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_page_size(bad)


def test_page_size_that_is_not_a_whole_larger_unit_is_refused() -> None:
    with pytest.raises(ValueError):
        format_page_size(3 * 1024 + 1024 * 1024 * 5)


@pytest.mark.parametrize(
    ("driver", "runtime", "expected"),
    [
        (DriverKind.CGROUPFS, "containerd", f"kubepods/burstable/podX/{CID}"),
        (DriverKind.CGROUPFS, "cri-o", f"kubepods/burstable/podX/crio-{CID}"),
        (DriverKind.SYSTEMD, "containerd", f"kubepods/burstable/podX/cri-containerd-{CID}.scope"),
        (DriverKind.SYSTEMD, "cri-o", f"kubepods/burstable/podX/crio-{CID}.scope"),
        (DriverKind.SYSTEMD, "docker", f"kubepods/burstable/podX/docker-{CID}.scope"),
    ],
)
def test_container_cgroup_dir_per_runtime_and_driver(driver: DriverKind, runtime: str, expected: str) -> None:
    assert container_cgroup_dir("/kubepods/burstable/podX", CID, driver, runtime) == expected


def test_runtime_names_map_to_naming_keys() -> None:
    assert [runtime_kind(n) for n in ("containerd", "CRI-O", "cri-dockerd", "something")] == [
        "containerd",
        "cri-o",
        "docker",
        "containerd",
    ]


@pytest.mark.parametrize(
    ("cgroups_path", "directory"),
    [
        (f"/kubepods/burstable/pod1/{CID}", f"kubepods/burstable/pod1/{CID}"),
        (
            f"kubepods-burstable-pod1_2.slice:cri-containerd:{CID}",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-{CID}.scope",
        ),
        (f":crio:{CID}", f"system.slice/crio-{CID}.scope"),
    ],
)
def test_cgroups_path_reads_as_runc_reads_it(cgroups_path: str, directory: str) -> None:
    assert cgroups_path_to_dir(cgroups_path) == directory


def test_malformed_cgroups_path_is_refused() -> None:
    with pytest.raises(ValueError):
        cgroups_path_to_dir("a:b")
