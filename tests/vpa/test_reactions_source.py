"""The reactions as the VPA source applies them (agent.vpa.floors, agent.vpa.reacting): a floor under the
recommendation, capped by maxAllowed, RequestsOnly and the node's free allocatable; an OOM kill in the pod
status turned into VPA's bump at once (a young pod, no updater condition); the same kill told twice counts
once, also after a restart (the floors in the state file); a CPU raise and its decay both decided at once;
nothing for a VPA not acted on or behind the panic button."""

from __future__ import annotations

from typing import Any

import pytest

from agent.core.model import Resources
from agent.pods.parse import parse_pod
from agent.vpa.applied import ActuatorState, dumps, loads
from agent.vpa.floors import Floor, caps, free_allocatable, with_floors
from agent.vpa.model import VPA, ContainerPolicy, ControlledValues, Recommendation, UpdateMode
from agent.vpa.react import Kind, Reaction
from agent.vpa.reacting import Reactor, oom_kills
from agent.vpa.source import VPASource
from tests.resize.manifests import ctr
from tests.vpa.pods import vpa_pod

MI = 1 << 20
OWNERS = {("shop", "ReplicaSet", "web-6d4f"): ("Deployment", "web")}
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
KILLED = "2027-01-15T08:00:00Z"


def _vpa(policy: ContainerPolicy | None = None, mode: UpdateMode = UpdateMode.IN_PLACE, opted_in: bool = True) -> VPA:
    rec = Recommendation("app", Resources(100, 100 * MI), Resources(50, 50 * MI), Resources(150, 150 * MI))
    return VPA("shop", "web", "Deployment", "web", mode, opted_in=opted_in, recommendations=(rec,),
               policies=(policy,) if policy else ())


def _oomed(raw: dict[str, Any], at: str = KILLED, where: str = "lastState") -> dict[str, Any]:
    raw["status"]["containerStatuses"] = [{"name": "app", "restartCount": 1, where: {"terminated": {
        "reason": "OOMKilled", "exitCode": 137, "startedAt": "2027-01-15T07:00:00Z", "finishedAt": at}}}]
    return raw


def _source(now: float = NOW, **kw: Any) -> tuple[VPASource, list[Reaction]]:
    said: list[Reaction] = []
    src = VPASource((kw.pop("vpa", None) or _vpa(),), OWNERS, now=lambda: now, reactor=Reactor(oom=kw.pop("oom", True)), **kw)
    src.reactor.on_reaction = lambda key, uid, r: said.append(r)
    return src, said


def test_an_oom_in_the_pod_status_bumps_memory_at_once_with_vpas_rule() -> None:
    # a pod inside its bounds (memory request 100Mi within [50Mi, 150Mi]) and young: VPA's updater would wait
    src, said = _source(now=NOW)
    raw = _oomed(vpa_pod(started="2027-01-15T07:00:00Z"))
    c = parse_pod(raw, sources=(src,)).containers[0]
    # used = max(request 100Mi, no peak known) -> needed max(200Mi, 120Mi) = 200Mi; the limit keeps its ratio 2
    assert (c.requests.memory, c.limits.memory) == (200 * MI, 400 * MI)
    assert [r.kind for r in said] == [Kind.OOM_BUMPED]
    assert "OOM-killed" in src.verdicts["shop/web-6d4f-x"][1].reason
    # the same kill, seen again at every later pod update: nothing more
    parse_pod(raw, sources=(src,))
    assert len(said) == 1


def test_an_oom_bump_is_capped_by_max_allowed_and_the_cap_is_said_once() -> None:
    policy = ContainerPolicy("app", max_allowed=Resources(None, 160 * MI))
    src, said = _source(vpa=_vpa(policy))  # a bare node: the agent's engine runs the container at 160Mi
    c = parse_pod(_oomed(vpa_pod()), sources=(src,)).containers[0]
    assert c.requests.memory == 160 * MI
    parse_pod(_oomed(vpa_pod(), at="2027-01-15T08:05:00Z"), sources=(src,))  # killed at 160Mi: 260Mi needed
    parse_pod(_oomed(vpa_pod(), at="2027-01-15T08:20:00Z"), sources=(src,))
    assert [r.kind for r in said] == [Kind.OOM_BUMPED, Kind.OOM_AT_CAP]
    assert "the maximum is 167772160" in said[1].why


def test_where_the_kubelet_resizes_a_kill_before_the_bump_was_admitted_bumps_nothing_more() -> None:
    src, said = _source(propose_changes=False)
    parse_pod(_oomed(vpa_pod()), sources=(src,))
    assert src.take_pending()["uid-web"][3][0].requests.memory == 200 * MI
    raw = _oomed(vpa_pod(), at="2027-01-15T08:05:00Z")  # the kubelet has not admitted it yet: 100Mi still
    raw["status"]["containerStatuses"][0]["allocatedResources"] = {"cpu": "100m", "memory": "100Mi"}
    parse_pod(raw, sources=(src,))
    assert len(said) == 1 and src.take_pending()["uid-web"][3][0].requests.memory == 200 * MI
    raw = _oomed(vpa_pod(), at="2027-01-15T08:10:00Z")  # admitted, and killed again: 300Mi
    raw["status"]["containerStatuses"][0]["allocatedResources"] = {"cpu": "100m", "memory": "200Mi"}
    parse_pod(raw, sources=(src,))
    assert [r.floor for r in said] == [200 * MI, 300 * MI]
    assert src.take_pending()["uid-web"][3][0].requests.memory == 300 * MI


@pytest.mark.parametrize(
    ("vpa", "enabled", "oom"),
    [
        (_vpa(opted_in=False), True, True),  # not opted in
        (_vpa(mode=UpdateMode.OFF), True, True),  # mode Off
        (_vpa(), False, True),  # the panic button
        (_vpa(), True, False),  # vpa.react.oom: false
    ],
)
def test_no_reaction_where_the_vpa_is_not_acted_on(vpa: VPA, enabled: bool, oom: bool) -> None:
    src, said = _source(vpa=vpa, oom=oom)
    src.enabled = enabled
    c = parse_pod(_oomed(vpa_pod()), sources=(src,)).containers[0]
    assert c.requests.memory == 100 * MI and said == [] and not src.reactor.floors


def test_a_cpu_raise_and_its_decay_are_decided_at_once() -> None:
    src, _ = _source()
    pod = parse_pod(vpa_pod(), sources=())
    src.react_cpu(pod, Reaction(Kind.CPU_RAISED, "app", 400, "throttled", limit_before=200))
    c = parse_pod(vpa_pod(), sources=(src,)).containers[0]
    assert (c.requests.cpu_milli, c.limits.cpu_milli) == (400, 800)
    assert "app: throttled" in src.verdicts["shop/web-6d4f-x"][1].reason
    src.react_cpu(pod, Reaction(Kind.CPU_RESTORED, "app", None, "calm"))
    c = parse_pod(vpa_pod(), sources=(src,)).containers[0]
    assert c.requests.cpu_milli == 100  # the recommendation, though the change alone would not have moved it


def test_the_floors_outlive_a_restart_and_an_old_kill_is_not_counted_again() -> None:
    saved: list[ActuatorState] = []
    src, _ = _source(on_state=saved.append)
    parse_pod(_oomed(vpa_pod()), sources=(src,))
    state = loads(dumps(saved[-1]))
    assert state.floors["uid-web"]["app"].memory == 200 * MI
    again, said_again = _source()
    again.restore(state)
    c = parse_pod(_oomed(vpa_pod()), sources=(again,)).containers[0]
    assert c.requests.memory == 200 * MI and said_again == []


def test_the_pod_status_tells_of_kills_in_state_and_last_state() -> None:
    assert oom_kills(_oomed(vpa_pod(), where="state")) == {"app": NOW}
    assert oom_kills(vpa_pod()) == {}
    raw = _oomed(vpa_pod())
    raw["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] = "Error"
    assert oom_kills(raw) == {}


def test_floors_under_the_recommendation_and_a_container_without_one() -> None:
    pod = parse_pod({**vpa_pod(), "spec": {"containers": [
        ctr("app", req={"cpu": "100m", "memory": "100Mi"}, lim={"cpu": "200m", "memory": "200Mi"}),
        ctr("side", req={"cpu": "50m", "memory": "10Mi"}, lim={"cpu": "50m", "memory": "10Mi"})]}}, sources=())
    vpa = with_floors(_vpa(), pod.containers, {"app": Floor(cpu_milli=400), "side": Floor(memory=20 * MI)})
    app, side = vpa.recommendations
    assert (app.target.cpu_milli, app.target.memory, app.upper.cpu_milli) == (400, 100 * MI, 400)
    assert (side.container, side.target.cpu_milli, side.target.memory) == ("side", 50, 20 * MI)


@pytest.mark.parametrize(
    ("policy", "free", "expected"),
    [
        (None, None, Resources(None, None)),
        (ContainerPolicy("app", max_allowed=Resources(500, 300 * MI)), None, Resources(500, 300 * MI)),
        (None, Resources(250, 50 * MI), Resources(350, 150 * MI)),  # the request plus what the node has left
        (ContainerPolicy("app", max_allowed=Resources(500, None)), Resources(-10, 0), Resources(100, 100 * MI)),
        (ContainerPolicy("app", values=ControlledValues.REQUESTS_ONLY), None, Resources(200, 200 * MI)),
        (ContainerPolicy("app", controlled=frozenset({"memory"})), None, Resources(100, None)),
        (ContainerPolicy("app", off=True), None, Resources(100, 100 * MI)),
    ],
)
def test_how_high_a_reaction_may_go(policy: ContainerPolicy | None, free: Resources | None, expected: Resources) -> None:
    c = parse_pod(vpa_pod(), sources=()).containers[0]
    assert caps(c, policy, free) == expected


def test_the_nodes_free_allocatable_leaves_out_finished_pods() -> None:
    running = parse_pod(vpa_pod(), sources=())
    done = parse_pod({**vpa_pod(), "metadata": {**vpa_pod()["metadata"], "uid": "u2"}, "status": {"phase": "Succeeded"}}, sources=())
    assert free_allocatable(Resources(1000, 1000 * MI), [running, done]) == Resources(900, 900 * MI)
