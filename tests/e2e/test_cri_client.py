"""The agent's CRIClient against a real containerd 1.6 + runc, checked against the kernel's cgroup files."""

from __future__ import annotations

import pytest

from agent.core.model import UNLIMITED, ContainerID, ContainerValues
from agent.cri import errors
from agent.cri.cgroup_paths import cgroups_path_to_dir, container_cgroup_dir
from agent.cri.client import CRIClient
from agent.cri.lookup import find_pod_containers
from agent.cri.types import ContainerState
from cgroupfs.types import DriverKind
from tests.e2e.conftest import E2EEnv, Kernel, PodRunner, resources

pytestmark = pytest.mark.e2e

MiB = 1 << 20
V1_UNLIMITED_MEMORY = 9223372036854771712  # what cgroup v1 reads back for "no limit" on 4 KiB pages
START = resources(period=100000, quota=50000, shares=512, memory=128 * MiB)


def values(period: int, quota: int, shares: int, memory: int) -> ContainerValues:
    return ContainerValues(cpu_shares=shares, cpu_quota=quota, cpu_period=period, memory_limit=memory)


def test_version_reports_containerd_speaking_cri_v1(client: CRIClient) -> None:
    v = client.version()
    assert v.runtime_name == "containerd"
    assert (v.version, v.runtime_api_version) == ("0.1.0", "v1")
    assert v.runtime_version


def test_lists_find_the_pod_its_containers_and_their_names(client: CRIClient, pods: PodRunner) -> None:
    pod = pods.run({"app": START, "sidecar": resources(shares=2)})
    other = pods.run({"app": resources(shares=2)}, name="other")

    (sandbox,) = client.list_sandboxes(pod_uid=pod.uid)
    assert (sandbox.id, sandbox.ready, sandbox.name, sandbox.namespace) == (
        pod.sandbox_id,
        True,
        "pod",
        "e2e",
    )
    assert {s.pod_uid for s in client.list_sandboxes()} >= {pod.uid, other.uid}

    listed = client.list_containers(pod_uid=pod.uid)
    assert {c.id for c in listed} == set(pod.containers.values())
    assert all(c.sandbox_id == pod.sandbox_id and c.state is ContainerState.RUNNING for c in listed)
    assert {c.id for c in client.list_containers(sandbox_id=other.sandbox_id)} == set(
        other.containers.values()
    )

    found = find_pod_containers(client, pod.uid)
    assert {name: c.id for name, c in found.items()} == pod.containers


def test_container_status_reports_the_spec_and_the_cgroup_path(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid = pod.containers["app"]
    st = client.container_status(cid, verbose=True)
    assert (st.id, st.name, st.state) == (cid, "app", ContainerState.RUNNING)
    assert st.resources == values(100000, 50000, 512, 128 * MiB)
    assert st.pid is not None and st.pid > 0
    # the runtime's cgroupsPath, the naming rule, and the kernel agree on where the container lives
    assert st.cgroups_path is not None
    computed = container_cgroup_dir(pod.cgroup_parent, cid, DriverKind.CGROUPFS, "containerd")
    assert cgroups_path_to_dir(st.cgroups_path) == computed
    assert str(st.pid) in kernel.read("cpu", "/" + computed, "cgroup.procs").split()


def test_update_resizes_cpu_and_memory_up_and_down_in_the_kernel(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid, cg = pod.containers["app"], pod.container_cgroup("app")
    assert kernel.cpu(cg) == (100000, 50000, 512)
    steps = [
        values(100000, 20000, 256, 64 * MiB),  # down
        values(50000, 150000, 1024, 256 * MiB),  # up, other period
        values(100000, 75000, 768, 200 * MiB),
    ]
    for want in steps:
        client.update_container_resources(cid, want)
        assert kernel.cpu(cg) == (want.cpu_period, want.cpu_quota, want.cpu_shares)
        assert kernel.memory_limit(cg) == want.memory_limit
        assert client.container_status(cid).resources == want


def test_unlimited_cpu_and_memory_are_applied_as_no_limit(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid, cg = pod.containers["app"], pod.container_cgroup("app")
    client.update_container_resources(cid, values(100000, UNLIMITED, 2, UNLIMITED))
    assert kernel.cpu(cg) == (100000, -1, 2)
    assert kernel.memory_limit(cg) == V1_UNLIMITED_MEMORY
    assert client.container_status(cid).resources == values(100000, UNLIMITED, 2, UNLIMITED)
    # and a limit can be set again afterwards
    client.update_container_resources(cid, values(100000, 30000, 2, 96 * MiB))
    assert kernel.cpu(cg) == (100000, 30000, 2)
    assert kernel.memory_limit(cg) == 96 * MiB


def test_zero_fields_leave_the_kernel_values_alone(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid, cg = pod.containers["app"], pod.container_cgroup("app")
    client.update_container_resources(cid, values(0, 0, 0, 64 * MiB))
    assert kernel.cpu(cg) == (100000, 50000, 512)
    assert kernel.memory_limit(cg) == 64 * MiB


def test_memory_below_usage_is_refused_and_the_kernel_keeps_the_old_limit(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid, cg = pod.containers["app"], pod.container_cgroup("app")
    # 40 MiB in the pod's shm tmpfs: charged to the container and not reclaimable (no swap)
    filled = pods.exec(pod, "app", "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1048576", "count=40")
    assert filled.exit_code == 0, filled.stderr
    usage = kernel.read_int("memory", cg, "memory.usage_in_bytes")
    assert usage >= 40 * MiB

    with pytest.raises(errors.MemoryBelowUsage) as info:
        client.update_container_resources(cid, values(100000, 50000, 512, 16 * MiB))
    err = info.value
    assert (err.limit, err.code, err.container_id) == (16 * MiB, "UNKNOWN", cid)
    assert err.usage >= 40 * MiB and err.peak >= err.usage
    assert kernel.memory_limit(cg) == 128 * MiB
    assert client.container_status(cid).state is ContainerState.RUNNING


def test_container_quota_above_the_pod_quota_is_refused_as_quota(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid, cg = pod.containers["app"], pod.container_cgroup("app")
    kernel.write("cpu", pod.cgroup_parent, "cpu.cfs_quota_us", "60000")  # the pod: 0.6 CPU
    with pytest.raises(errors.QuotaRefused) as info:
        client.update_container_resources(cid, values(100000, 90000, 512, 128 * MiB))
    assert (info.value.file, info.value.value) == ("cpu.cfs_quota_us", "90000")
    assert kernel.cpu(cg)[1] == 50000


def test_cpu_quota_below_one_millisecond_is_refused(
    client: CRIClient, pods: PodRunner, kernel: Kernel
) -> None:
    pod = pods.run({"app": START})
    cid, cg = pod.containers["app"], pod.container_cgroup("app")
    with pytest.raises(errors.QuotaRefused):
        client.update_container_resources(cid, values(100000, 500, 512, 128 * MiB))
    assert kernel.cpu(cg)[1] == 50000


def test_update_pod_sandbox_resources_is_unimplemented_on_containerd_1_6(
    client: CRIClient, pods: PodRunner
) -> None:
    if not client.version().runtime_version.startswith("1.6"):
        pytest.skip("the expectation is containerd 1.6's")
    pod = pods.run({"app": START})
    assert (
        client.update_pod_sandbox_resources(pod.sandbox_id, None, values(100000, 100000, 1024, 256 * MiB))
        is False
    )


def test_stop_container_then_the_runtime_reports_it_exited(client: CRIClient, pods: PodRunner) -> None:
    pod = pods.run({"app": START})
    cid = pod.containers["app"]
    client.stop_container(cid, timeout_s=0)
    assert client.container_status(cid).state is ContainerState.EXITED


def test_unknown_container_is_not_found(client: CRIClient) -> None:
    missing = ContainerID("0123456789abcdef" * 4)
    with pytest.raises(errors.NotFound):
        client.update_container_resources(missing, values(100000, 50000, 512, 128 * MiB))
    with pytest.raises(errors.NotFound):
        client.container_status(missing)


def test_an_unreachable_socket_is_a_clear_unavailable_error(e2e_env: E2EEnv) -> None:
    sock = e2e_env.directory / "no-such-runtime.sock"
    c = CRIClient(f"unix://{sock}", timeout=1.0)
    with c, pytest.raises(errors.Unavailable) as info:
        c.version()
    assert f"socket {sock} does not exist" in str(info.value)
