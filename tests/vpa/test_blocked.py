"""What becomes of a VPA-driven resize the node refuses (Infeasible) or puts off (Deferred): reported once,
and sent again only when the recommendation lowers (Infeasible) or changes (Deferred); an OOM kill the
node saw acts at once; applied targets and refused resizes survive a restart (agent.vpa.applied)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.core.model import Resources
from agent.pods.parse import parse_pod
from agent.recommender.publish import RECOMMENDER_NAME
from agent.vpa.applied import FILE, ActuatorState, dumps, loads
from agent.vpa.model import VPA, Recommendation, UpdateMode
from agent.vpa.policy import Blocked, ContainerTarget, ResizeBlock, retry_allowed
from agent.vpa.source import LOCAL_RECOMMENDER, VPASource, resize_pending
from agent.vpa.state import load, save
from tests.vpa.pods import vpa_pod

MI = 1 << 20
OWNERS = {("shop", "ReplicaSet", "web-6d4f"): ("Deployment", "web")}
KEY = "shop/web-6d4f-x"


def _t(cpu: int, mem: int = 100, cpu_lim: int | None = None, mem_lim: int = 200) -> ContainerTarget:
    return ContainerTarget("app", Resources(cpu, mem * MI), Resources(cpu_lim if cpu_lim is not None else 2 * cpu, mem_lim * MI))


@pytest.mark.parametrize(
    ("state", "new", "allowed"),
    [
        # Infeasible at 4 cores: asking for the same again, or more, can never fit
        (ResizeBlock.INFEASIBLE, _t(4000), False),
        (ResizeBlock.INFEASIBLE, _t(5000), False),
        # one value lower (the CPU request 3.9 cores) may fit: sent
        (ResizeBlock.INFEASIBLE, _t(3900), True),
        # more CPU but a lower memory limit (150Mi < 200Mi): lower somewhere, sent
        (ResizeBlock.INFEASIBLE, _t(5000, mem_lim=150), True),
        # Deferred: the node retries the same itself; the same decision is not sent again
        (ResizeBlock.DEFERRED, _t(4000), False),
        # any change is sent, up as well as down
        (ResizeBlock.DEFERRED, _t(4100), True),
        (ResizeBlock.DEFERRED, _t(3000), True),
    ],
)
def test_the_retry_rule(state: ResizeBlock, new: ContainerTarget, allowed: bool) -> None:
    assert retry_allowed(Blocked("shop/web", (_t(4000),), state), (new,)) is allowed


def test_a_target_for_a_container_not_refused_before_is_sent() -> None:
    other = ContainerTarget("sidecar", Resources(100, MI), Resources(None, None))
    assert retry_allowed(Blocked("shop/web", (_t(4000),), ResizeBlock.INFEASIBLE), (_t(4000), other))


def _vpa(cpu: int, lower: int, memory: int = 100, recommenders: tuple[str, ...] = ()) -> VPA:
    rec = Recommendation("app", Resources(cpu, memory * MI), Resources(lower, 50 * MI), Resources(cpu + 100, 200 * MI))
    return VPA("shop", "web", "Deployment", "web", UpdateMode.IN_PLACE, opted_in=True, recommendations=(rec,), recommenders=recommenders)


def _pending(reason: str, message: str = "") -> list[dict[str, Any]]:
    return [{"type": "PodResizePending", "status": "True", "reason": reason, "message": message}]


def test_the_kubelet_condition_is_read() -> None:
    assert resize_pending(vpa_pod(conditions=_pending("Infeasible", "Node didn't have enough capacity"))) == (
        ResizeBlock.INFEASIBLE, "Node didn't have enough capacity")
    assert resize_pending(vpa_pod(conditions=_pending("Deferred"))) == (ResizeBlock.DEFERRED, "")
    assert resize_pending(vpa_pod(conditions=[{"type": "PodResizePending", "status": "False", "reason": "Infeasible"}])) is None
    assert resize_pending(vpa_pod()) is None
    assert resize_pending({"status": "garbage"}) is None


def test_where_the_kubelet_resizes_an_infeasible_resize_waits_for_a_lower_recommendation() -> None:
    reported: list[tuple[str, str, Blocked]] = []
    src = VPASource((_vpa(4000, 3000),), OWNERS, now=lambda: 1e10, propose_changes=False,
                    on_blocked=lambda key, uid, b: reported.append((key, uid, b)))
    assert src.propose(vpa_pod()) is None
    [(ns, name, vpa, targets)] = src.take_pending().values()  # 100m -> 4 cores: sent
    assert (ns, name) == ("shop", "web-6d4f-x")
    assert targets[0].requests.cpu_milli == 4000
    src.sent_through_api("uid-web", vpa, targets)
    # the kubelet wrote the new spec and refused it: reported once, with the VPA's name
    refused = vpa_pod("4", "8", _pending("Infeasible", "Node didn't have enough capacity: cpu, requested: 4000, capacity: 2000"))
    src.propose(refused)
    src.propose(refused)
    assert [(k, u, b.state, b.vpa) for k, u, b in reported] == [(KEY, "uid-web", ResizeBlock.INFEASIBLE, "shop/web")]
    assert "Infeasible" in src.verdicts[KEY][1].reason and "lowers" in src.verdicts[KEY][1].reason
    # a higher recommendation is not sent
    src.vpas = (_vpa(5000, 4500),)
    src.propose(refused)
    assert src.take_pending() == {} and not src.verdicts[KEY][1].apply
    # a lower one is: 3 cores (relative to the spec's 4: outside [2.5, 3.1])
    src.vpas = (_vpa(3000, 2500),)
    src.propose(refused)
    [(_, _, _, lower)] = src.take_pending().values()
    assert lower[0].requests.cpu_milli == 3000 and "uid-web" not in src.blocked


def test_where_the_kubelet_resizes_a_deferred_resize_clears_when_the_condition_goes() -> None:
    reported: list[Blocked] = []
    src = VPASource((_vpa(1000, 800),), OWNERS, now=lambda: 1e10, propose_changes=False,
                    on_blocked=lambda key, uid, b: reported.append(b))
    src.propose(vpa_pod())
    [(_, _, vpa, targets)] = src.take_pending().values()
    src.sent_through_api("uid-web", vpa, targets)
    src.propose(vpa_pod("1", "2", _pending("Deferred", "Node didn't have enough resource: cpu")))
    assert [b.state for b in reported] == [ResizeBlock.DEFERRED]
    src.propose(vpa_pod("1", "2"))  # the kubelet admitted it: the condition is gone
    assert "uid-web" not in src.blocked


def test_where_the_agent_resizes_the_engine_state_blocks_and_the_spec_is_not_resized_back() -> None:
    reported: list[Blocked] = []
    src = VPASource((_vpa(4000, 3000),), OWNERS, now=lambda: 1e10, on_blocked=lambda key, uid, b: reported.append(b))
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 4000
    src.observe_status("uid-web", KEY, "Infeasible", "asks for more CPU than the node's allocatable")
    src.observe_status("uid-web", KEY, "Infeasible", "asks for more CPU than the node's allocatable")
    assert len(reported) == 1 and reported[0].message.startswith("asks for more")
    src.vpas = (_vpa(6000, 5000),)  # higher: held; the refused target stays desired (the engine keeps it Infeasible)
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 4000
    assert "lowers" in src.verdicts[KEY][1].reason
    src.vpas = (_vpa(1500, 1200),)  # lower: applied
    assert parse_pod(vpa_pod(), sources=(src,)).containers[0].requests.cpu_milli == 1500
    src.observe_status("uid-web", KEY, "Done", "")
    assert src.blocked == {}
    src.observe_status("other-uid", "shop/other", "Infeasible", "x")  # not VPA-driven: nothing
    assert src.blocked == {} and len(reported) == 1


def test_an_oom_the_node_saw_is_a_quick_oom_at_once() -> None:
    now = 1_795_000_000.0
    young = "2026-11-25T00:00:00Z"
    # a young pod inside its bounds (100m in [50m, 400m]), a small change: VPA waits (12 h rule)
    src = VPASource((_vpa(120, 50),), OWNERS, now=lambda: now)
    assert parse_pod(vpa_pod(started=young), sources=(src,)).containers[0].requests.cpu_milli == 100
    src.oom_seen(KEY, "app", None)
    assert parse_pod(vpa_pod(started=young), sources=(src,)).containers[0].requests.cpu_milli == 120
    assert src.verdicts[KEY][1].reason == "quick OOM"


def test_a_vpa_naming_the_node_recommender_gets_its_raised_memory_target_at_once() -> None:
    assert LOCAL_RECOMMENDER == RECOMMENDER_NAME
    now = 1_795_000_000.0
    for recommenders, expected in (((LOCAL_RECOMMENDER,), 300), ((), 100)):
        src = VPASource((_vpa(100, 50, memory=100, recommenders=recommenders),), OWNERS, now=lambda: now)
        src.oom_seen(KEY, "app", 300 * MI)  # the node's recommender after the OOM bump
        c = parse_pod(vpa_pod(), sources=(src,)).containers[0]
        # with the node's recommender: memory 100Mi -> 300Mi, limit keeps the ratio 2: 600Mi;
        # any other recommender's status is taken as it is (nothing to apply: the pod has 100Mi)
        assert c.requests.memory == expected * MI
        if expected == 300:
            assert c.limits.memory == 600 * MI


def test_an_old_oom_is_no_quick_oom() -> None:
    clock = [1_795_000_000.0]
    src = VPASource((_vpa(120, 50),), OWNERS, now=lambda: clock[0])
    src.oom_seen(KEY, "app", None)
    clock[0] += 601  # past the updater's 10 minutes
    assert parse_pod(vpa_pod(started="2026-11-25T00:00:00Z"), sources=(src,)).containers[0].requests.cpu_milli == 100


def test_the_kept_state_round_trips_and_a_damaged_file_is_set_aside(tmp_path: Path) -> None:
    applied = {"uid-web": ("shop/web", (_t(300), ContainerTarget("side", Resources(None, 5 * MI), Resources(None, None))))}
    blocked = {"uid-db": Blocked("shop/db", (_t(4000),), ResizeBlock.INFEASIBLE, "403 node didn't have enough allocatable resources")}
    state = ActuatorState(applied, blocked)
    assert loads(dumps(state)) == state
    assert load(tmp_path) == (ActuatorState(), None)
    save(tmp_path, state)
    assert load(tmp_path) == (state, None)
    for bad in (
        b"", b"{", b'{"version": 2, "pods": {}}',
        b'{"version": 1, "pods": {"u": {"vpa": "x", "targets": [{"container": "a", "requests": {"cpuMilli": -1}}]}}}',
        b'{"version": 1, "pods": {}, "blocked": {"u": {"vpa": "x", "targets": [], "state": "Maybe"}}}',
        b'{"version": 1, "pods": {}, "blocked": []}',
    ):
        (tmp_path / FILE).write_bytes(bad)
        got, warning = load(tmp_path)
        assert got == ActuatorState() and warning is not None and "set aside" in warning
        assert (tmp_path / (FILE + ".bad")).read_bytes() == bad


def test_the_source_persists_what_it_applies_blocks_and_forgets() -> None:
    saved: list[ActuatorState] = []
    src = VPASource((_vpa(300, 200),), OWNERS, now=lambda: 1e10, on_state=saved.append)
    parse_pod(vpa_pod(), sources=(src,))
    parse_pod(vpa_pod(), sources=(src,))  # the same target again: no write
    assert len(saved) == 1 and saved[0].applied["uid-web"][1][0].requests.cpu_milli == 300
    src.observe_status("uid-web", KEY, "Infeasible", "too big")
    assert saved[-1].blocked["uid-web"].message == "too big" and len(saved) == 2
    src.prune(set(), set())
    assert saved[-1] == ActuatorState() and len(saved) == 3


def test_a_refused_resize_restored_after_a_restart_is_not_sent_again() -> None:
    """Where the kubelet resizes, a pods/resize the API server refused never reaches the spec; the
    restarted agent must not send the same again (nor a higher one)."""
    refused = Blocked("shop/web", (_t(4000),), ResizeBlock.INFEASIBLE, "403 node didn't have enough allocatable resources")
    src = VPASource((_vpa(4000, 3000),), OWNERS, now=lambda: 1e10, propose_changes=False)
    src.restore(ActuatorState(blocked={"uid-web": refused}))
    src.propose(vpa_pod())  # the spec is still 100m: no condition, and the spec does not hold what was refused
    assert src.take_pending() == {} and "lowers" in src.verdicts[KEY][1].reason
    src.vpas = (_vpa(2000, 1500),)
    src.propose(vpa_pod())
    assert [t[3][0].requests.cpu_milli for t in src.take_pending().values()] == [2000]
