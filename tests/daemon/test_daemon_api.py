"""The real daemon against the fake API server, the fake cgroup tree and the fake CRI."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc

from tests.daemon.harness import CONDITION, Env, api_pod, wait_for
from tests.resize.journal import signature
from tests.resize.manifests import ctr, manifest
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.protocol import Recorded

BURSTABLE_SHARES = "cpu/kubepods/burstable/cpu.shares"


def _burstable(name: str, cpu: str = "250m", limit: str = "500m") -> dict[str, Any]:
    return manifest(name, [ctr("app", req={"cpu": cpu, "memory": "64Mi"}, lim={"cpu": limit, "memory": "128Mi"})])


def test_a_pod_added_gets_its_pod_cgroup_and_the_tiers_applied(env: Env) -> None:
    env.node.add_pod(_burstable("web"))
    env.publish("web")
    daemon = env.daemon()
    daemon.ready()
    pod = env.node.pods["web"].pod_dir
    wait_for(lambda: env.node.read(f"cpu/{pod}/cpu.cfs_quota_us") == "50000", "web's pod quota")
    # the rest of web's pass may still be under way (the engine writes the tier after the pod's quota)
    wait_for(lambda: env.node.read(f"cpu/{pod}/cpu.shares") == "256", "web's pod shares")
    wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "256", "the burstable tier to count web")

    env.node.add_pod(_burstable("api", cpu="500m", limit="1"))  # the kubelet creates it
    env.publish("api")
    api = env.node.pods["api"].pod_dir
    wait_for(lambda: env.node.read(f"cpu/{api}/cpu.cfs_quota_us") == "100000", "api's pod quota")
    wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "768", "the burstable tier to count api")
    status, body = daemon.get("/metrics")
    assert status == 200 and "kube_cgroup_agent_writes_total" in body
    # the summary line is logged when api's pass ends, after its writes
    wait_for(lambda: daemon.logged("reconcile", pod="default/api"), "one summary line per reconcile, with pod context")

    env.cluster.delete(env.uid("web"))
    wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "512", "the burstable tier to drop web")
    assert daemon.terminate() == 0


def test_a_resize_is_applied_in_order_and_reported(env: Env) -> None:
    env.node.add_pod(manifest("g", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    env.publish("g")
    daemon = env.daemon()
    daemon.ready()
    wait_for(lambda: env.node.read(f"cpu/{env.node.pods['g'].pod_dir}/cpu.cfs_quota_us") == "50000", "g applied")
    wait_for(lambda: daemon.logged("reconcile", pod="default/g"), "g's first pass to end")  # nothing of it left
    env.node.events.clear()
    env.node.resize("g", {"app": {"limits": {"cpu": "1", "memory": "512Mi"}}})
    env.publish("g")

    uid = env.uid("g")
    wait_for(lambda: "ResizeDone" in env.cluster.event_reasons(uid), "the ResizeDone event")
    assert env.node.container_state("g", "app")[:2] == (1.0, 512 * 2**20)
    assert env.node.violations == []
    # the memory phase, then the CPU phase; at each runtime update the pod cgroup was already grown
    # (the harness checks every child against its parent at every update: violations stays empty)
    assert [signature(e) for e in env.node.events] == [("ctr:app", "memory", 1), ("ctr:app", "cpu", 1)]
    pod_dir = env.node.pods["g"].pod_dir
    assert env.node.read(f"memory/{pod_dir}/memory.limit_in_bytes") == str(512 * 2**20)
    reasons = env.cluster.event_reasons(uid)
    assert reasons.index("ResizeAccepted") < reasons.index("ResizeDone")
    # the condition patch and the Event are sent by the reporter one after the other: wait for both
    condition = wait_for(
        lambda: (c := env.cluster.condition(uid, CONDITION)) is not None and c.get("reason") == "Done" and c,
        "the Done condition",
    )
    assert condition["status"] == "True" and condition["reason"] == "Done"
    patches = env.cluster.recorded("PATCH", "/status")
    assert patches and all(set(p.body["status"]) == {"conditions"} for p in patches)
    assert all(p.content_type == "application/strategic-merge-patch+json" for p in patches)
    assert daemon.terminate() == 0


def test_an_api_server_restart_relists_and_nothing_is_missed(env: Env) -> None:
    for name in ("a", "b"):
        env.node.add_pod(_burstable(name))
        env.publish(name)
    daemon = env.daemon()
    daemon.ready()
    wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "512", "both pods counted")
    lists_before = len([r for r in env.cluster.recorded("GET", "/api/v1/pods?") if "watch=" not in r.path])

    env.node.add_pod(_burstable("c", cpu="1", limit="2"))
    env.node.resize("b", {"app": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}})

    def while_down(cluster: FakeCluster) -> None:  # changes the daemon cannot see as watch events
        cluster.delete(env.uid("a"))
        cluster.apply(api_pod(env.node, "b"))
        cluster.apply(api_pod(env.node, "c"))

    env.api.restart(while_down)

    wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "1280", "the tier from the relisted pods (b + c)")
    # b's resize and c's pod cgroup are passes of their own, independent of the tiers' pass
    wait_for(lambda: env.node.container_state("b", "app")[0] == 1.0, "b's container resized after the relist")
    c_quota = f"cpu/{env.node.pods['c'].pod_dir}/cpu.cfs_quota_us"
    wait_for(lambda: env.node.read(c_quota) == "200000", "c's pod cgroup after the relist")
    lists = [r for r in env.cluster.recorded("GET", "/api/v1/pods?") if "watch=" not in r.path]
    assert len(lists) > lists_before, "a 410 after the restart must relist"
    _, metrics = daemon.get("/metrics")
    assert 'kube_cgroup_agent_watch_restarts_total{reason="gone"}' in metrics
    assert daemon.terminate() == 0


def test_a_dropped_watch_resumes_from_its_resource_version_without_relisting(env: Env) -> None:
    env.node.add_pod(_burstable("a"))
    env.publish("a")
    daemon = env.daemon()
    daemon.ready()
    # /readyz answers once the list is delivered and the tiers are done, which can be before the daemon's
    # source thread opens its watch: a drop then would drop nothing, and b would come through that watch
    wait_for(lambda: env.cluster.open_watches("pods") == 1, "the daemon's pod watch to be open")

    def lists() -> list[Recorded]:
        return [r for r in env.cluster.recorded("GET", "/api/v1/pods?") if "watch=" not in r.path]

    def watches() -> list[Recorded]:
        return [r for r in env.cluster.recorded("GET", "/api/v1/pods?") if "watch=" in r.path]

    before, opened = len(lists()), len(watches())
    assert env.cluster.drop_watches() >= 1  # the pod watch (and the LimitRange watch beside it)
    env.node.add_pod(_burstable("b"))  # after the drop: only a new watch can deliver b
    env.publish("b")
    wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "512", "b through the resumed watch")
    assert len(lists()) == before, "a dropped watch is resumed, not relisted"
    assert len(watches()) > opened and all("allowWatchBookmarks=true" in r.path for r in watches())
    resumed = parse_qs(urlsplit(watches()[opened].path).query)
    assert resumed["resourceVersion"] == env.cluster.dropped, "resumed from the last resourceVersion it was sent"
    assert daemon.terminate() == 0


def test_sigterm_mid_resize_stops_cleanly_and_the_next_start_completes_it(env: Env) -> None:
    two = [ctr(n, lim={"cpu": "500m", "memory": "128Mi"}) for n in ("one", "two")]
    env.node.add_pod(manifest("g", two))
    env.publish("g")
    daemon = env.daemon()
    daemon.ready()
    pod_dir = env.node.pods["g"].pod_dir
    wait_for(lambda: env.node.read(f"cpu/{pod_dir}/cpu.cfs_quota_us") == "100000", "g applied")
    wait_for(lambda: daemon.logged("reconcile", pod="default/g"), "g's first pass to end")  # before the hook

    service = env.cri.service
    original = service.on_update
    stopped: list[int] = []

    def sigterm_on_first_update(container: Any, merged: Any) -> None:
        assert original is not None
        original(container, merged)
        if not stopped:  # SIGTERM while the resize is under way, and the runtime fails from now on
            stopped.append(1)
            # the hook runs under the service's lock: queue the failures directly (inject_error would wait)
            service.errors.setdefault("UpdateContainerResources", []).extend(
                [(grpc.StatusCode.INTERNAL, "runtime restarting")] * 100
            )
            assert daemon.proc is not None
            daemon.proc.send_signal(15)

    service.on_update = sigterm_on_first_update
    env.node.resize("g", {n: {"limits": {"cpu": "1", "memory": "128Mi"}} for n in ("one", "two")})
    env.publish("g")
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == 0
    assert stopped
    assert env.node.violations == []
    cpu = [env.node.container_state("g", n)[0] for n in ("one", "two")]
    assert sorted(cpu) == [0.5, 1.0], "stopped after the first container, before the second"

    service.on_update = original
    service.errors.clear()
    uid = env.uid("g")
    second = env.daemon()
    wait_for(lambda: [env.node.container_state("g", n)[0] for n in ("one", "two")] == [1.0, 1.0], "completion")
    wait_for(lambda: "ResizeDone" in env.cluster.event_reasons(uid), "ResizeDone after the restart")
    assert env.node.violations == []
    assert second.terminate() == 0


def test_a_pod_with_invalid_pod_level_limits_gets_an_event_and_the_others_go_on(env: Env) -> None:
    bad = manifest("bad", [ctr("app", req={"cpu": "500m", "memory": "64Mi"})])
    bad["spec"]["resources"] = {"limits": {"cpu": "100m"}}  # below the container's request
    env.node.add_pod(_burstable("good"))
    env.publish("good")
    env.cluster.apply({**bad, "spec": {**bad["spec"], "nodeName": "node-1"}, "status": {"phase": "Running"}})
    daemon = env.daemon()
    daemon.ready()
    wait_for(lambda: "InvalidPodLevelLimits" in env.cluster.event_reasons("uid-bad"), "the Warning event")
    event = next(e for e in env.cluster.events.values() if e["reason"] == "InvalidPodLevelLimits")
    assert event["type"] == "Warning" and "below" in event["message"]
    wait_for(lambda: env.node.read(f"cpu/{env.node.pods['good'].pod_dir}/cpu.cfs_quota_us") == "50000", "good")
    assert daemon.terminate() == 0


def test_observe_only_reports_drift_and_writes_nothing(env: Env) -> None:
    env.node.add_pod(_burstable("web"))
    env.publish("web")
    before = env.node.read(BURSTABLE_SHARES)
    daemon = env.daemon(observeOnly=True)
    daemon.ready()
    wait_for(lambda: daemon.logged("drift.observed", path=BURSTABLE_SHARES), "the drift report")
    wait_for(lambda: daemon.logged("reconcile", pod="default/web"), "web's pass to end")  # or nothing is proven
    assert env.node.read(BURSTABLE_SHARES) == before
    assert env.node.read(f"cpu/{env.node.pods['web'].pod_dir}/cpu.cfs_quota_us") == "-1"
    assert daemon.terminate() == 0


def test_a_value_reverted_again_and_again_is_left_to_its_owner_with_one_warning(env: Env) -> None:
    env.node.add_pod(_burstable("web"))
    env.publish("web")
    daemon = env.daemon(resyncPeriod="200ms", driftBackoff="10ms", driftMaxReverts=2)
    daemon.ready()
    for _ in range(3):  # another writer puts the kubelet-era value back each time the agent fixes it
        wait_for(lambda: env.node.read(BURSTABLE_SHARES) == "256", "the agent's value")
        env.node.tree.set(BURSTABLE_SHARES, "1024")
    yielded = wait_for(lambda: daemon.logged("drift.yielded", path=BURSTABLE_SHARES), "the one warning")
    assert "QoS container manager" in yielded[0]["message"]
    seen = len(daemon.logged("reconcile", scope="tiers"))
    wait_for(lambda: len(daemon.logged("reconcile", scope="tiers")) >= seen + 2, "two more tier passes")
    assert env.node.read(BURSTABLE_SHARES) == "1024"
    assert len(daemon.logged("drift.yielded", path=BURSTABLE_SHARES)) == 1
    assert daemon.terminate() == 0
