"""CRIClient against the in-process fake runtime, call by call: what each sends and what it reads back,
and containerd's merge rules for an update (0 keeps the runtime's value, -1 is unlimited)."""

from __future__ import annotations

from agent.core.model import UNLIMITED, ContainerValues, HugepageLimit
from agent.cri.client import CRIClient
from agent.cri.types import ContainerState
from agent.cri.v1 import api_pb2 as pb
from tests.cri.client_support import OTHER_UID, UID
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fake_cri.state import FakeContainer


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
