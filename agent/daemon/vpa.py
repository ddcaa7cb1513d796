"""VPA in place beside the pod loop: watches the VPAs of this node's pods and this node's labels (the panic
button), and keeps the VPA source (agent.vpa.source) current.

What it reads is what its node needs (a node's cost grows with its pods, not with the cluster): the owner
chain of each pod (its ReplicaSet's Deployment: one GET per ReplicaSet, agent.kube.owners), then one
watch of the VPAs labelled with those owners (`kube-cgroup-agent.io/target`, set on every VPA by the
cluster's keeper: agent.vpa.target), replaced when the node's owners change (agent.daemon.scope).

Two ways to act, by the ownership table. On a bare node (the agent resizes containers) the source proposes
the recommendation and the one reconciler resizes the pod as any other. On a node whose kubelet resizes
containers, the source only decides; this component sends the decision to the API as the VPA updater
does — a patch of `pods/resize`, then the `vpaInPlaceUpdated` annotation — and the kubelet actuates it;
the agent follows its allocation. It never evicts and never deletes a pod.

No VPA CRD in the cluster: the feature stays off with one warning and is looked for again every 5 minutes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

from agent.core.model import Resources
from agent.core.ownership import Thing
from agent.daemon.components import Component, DaemonContext
from agent.daemon.objects import ObjectCache, Threads
from agent.daemon.scope import ScopedWatches, WatchSpec
from agent.daemon.vpa_react import StarvationLoop
from agent.daemon.vpa_usage import UsageLoop
from agent.infra.apiserver import STRATEGIC_MERGE, APIServer, path
from agent.infra.logging import get_logger
from agent.kube.errors import APIError, APIForbidden, APINotFound, wrap
from agent.kube.node_vpas import node_selector
from agent.kube.owners import OwnerLinks
from agent.pods.parse import resource_list
from agent.resize.types import ResizeState, ResizeStatus
from agent.vpa.applied import ActuatorState
from agent.vpa.config import PANIC_LABEL
from agent.vpa.floors import free_allocatable
from agent.vpa.model import VPA, VPAParseError
from agent.vpa.parse import parse_vpa
from agent.vpa.podlevel import pod_bounds
from agent.vpa.podlevel_source import split
from agent.vpa.policy import Blocked, ContainerTarget, ResizeBlock, api_resources
from agent.vpa.react import EVENT_REASONS, Kind, Reaction
from agent.vpa.reacting import Reactor
from agent.vpa.source import VPASource, owner_chain
from agent.vpa.state import load, save

log = get_logger("agent.daemon.vpa")

GROUP: Final = "autoscaling.k8s.io"
VERSION: Final = "v1"
PLURAL: Final = "verticalpodautoscalers"
CRD_RETRY_S: Final = 300.0
IN_PLACE_ANNOTATION: Final = "vpaInPlaceUpdated"
SETTLE_S: Final = 0.2
RETRY_SCOPE_S: Final = 30.0  # a burst of pod arrivals changes the VPA watch once


class VPAComponent:
    name = "vpa"

    def __init__(self, ctx: DaemonContext, source: VPASource, via_api: bool) -> None:
        self.ctx = ctx
        self.source = source
        self.via_api = via_api  # the kubelet resizes containers here: act through pods/resize
        self.api = APIServer(ctx.api)
        self.vpas = ScopedWatches(self.api, ctx.metrics, PLURAL, self._vpas_changed)
        self.owner_links = OwnerLinks(self.api)
        self.scope_wake = threading.Event()  # the node's pods changed: its owners and VPA watch may too
        ctx.on_pods.append(self.scope_wake.set)
        self._vpas_lock = threading.Lock()
        self.nodes = ObjectCache(self._node_changed)
        self._reported: set[tuple[str, str]] = set()  # (VPA, problem) already logged
        self._annotation_forbidden = False
        self._threads = Threads(ctx.metrics)
        self.patched: dict[str, tuple[ContainerTarget, ...]] = {}  # pod uid -> what was last sent
        source.on_verdict = lambda pod, vpa, v: log.info(
            "vpa.decision", pod=pod, vpa=vpa, apply=v.apply, reason=v.reason, held=list(v.held),
            **({"restarts": list(v.restarts)} if v.restarts else {}),
        )
        source.on_blocked = self._blocked
        source.on_conflict = self._conflict
        source.on_state = self._save_state
        ctx.on_oom.append(self._oom)
        source.reactor.on_reaction = self._reacted
        source.reactor.free = self._free
        if not via_api:
            ctx.on_statuses.append(self._statuses)

    # ---- what became of a resize ----

    def _blocked(self, pod: str, uid: str, blocked: Blocked) -> None:
        """A VPA-driven resize refused or put off: an Event naming the VPA, a metric, a log line (once)."""
        state = blocked.state.value
        sizes = "; ".join(f"{t.container or 'pod level'} {json.dumps(api_resources(t), sort_keys=True)}" for t in blocked.targets)
        message = f"VPA {blocked.vpa}: resize to {sizes} is {state}" + (f": {blocked.message}" if blocked.message else "")
        self.ctx.metrics.vpa_resizes.labels(state.lower()).inc()
        self.ctx.event(uid, f"VPAResize{state}", message[:1000], blocked.state is ResizeBlock.INFEASIBLE)
        log.warning("vpa.resize_blocked", pod=pod, vpa=blocked.vpa, state=state, message=blocked.message)

    def _reacted(self, pod: str, uid: str, reaction: Reaction) -> None:
        """A reaction in place (agent.vpa.react): an Event, a metric, a log line, each time."""
        message = f"container {reaction.container}: {reaction.why}"
        self.ctx.metrics.vpa_reactions.labels(reaction.kind.value).inc()
        self.ctx.event(uid, EVENT_REASONS[reaction.kind], message[:1000], reaction.kind in (Kind.CPU_AT_CAP, Kind.OOM_AT_CAP))
        log.info("vpa.reaction", pod=pod, reaction=reaction.kind.value, container=reaction.container, floor=reaction.floor, why=reaction.why)

    def _free(self) -> Resources | None:
        """The node's allocatable less its pods' requests (None before the node is read)."""
        for node in self.nodes.values():
            raw = (node.get("status") or {}).get("allocatable")
            if raw:
                return free_allocatable(resource_list(raw, "allocatable"), self.ctx.pods())
        return None

    def _conflict(self, pod: str, uid: str, vpas: tuple[str, ...]) -> None:
        """Two VPAs target one pod's owner chain: left alone, never guessed; said once (Event + log)."""
        message = f"VPAs {', '.join(vpas)} all target this pod's owner chain: no VPA-driven change until one remains"
        log.warning("vpa.conflict", pod=pod, vpas=list(vpas), message=message)
        self.ctx.event(uid, "VPAConflict", message, True)

    def _statuses(self, statuses: Sequence[ResizeStatus]) -> None:
        """The engine's resize states (where the agent resizes): follow those of VPA-driven resizes."""
        for st in statuses:
            if st.uid in self.source.applied and st.state is ResizeState.DONE:
                self.ctx.metrics.vpa_resizes.labels("done").inc()
            self.source.observe_status(st.uid, st.pod, st.state.value, st.message or st.reason)

    def _save_state(self, state: ActuatorState) -> None:
        try:
            save(self.ctx.settings.state_dir, state)
        except OSError as err:
            self.ctx.metrics.errors.labels("StateWriteError").inc()
            log.warning("vpa.state_write_failed", error=f"{err.strerror or err}", message="applied VPA targets are decided again after a restart")

    def _oom(self, pod: str, container: str, memory: int | None) -> None:
        """An OOM kill the node saw: a quick OOM for VPA's rules at once (the pod status comes later)."""
        if not self.source.enabled:
            return
        self.source.oom_seen(pod, container, memory)
        uids = [p.uid for p in self.ctx.pods() if p.key == pod]
        if uids:
            self.ctx.refresh(uids)

    # ---- outside state in ----

    def _vpas_changed(self) -> None:
        with self._vpas_lock:  # the VPA watches call it from their threads
            self._vpas_changed_locked()

    def _vpas_changed_locked(self) -> None:
        parsed: list[VPA] = []
        for raw in self.vpas.values():
            try:
                parsed.append(parse_vpa(raw))
            except VPAParseError as err:
                if (err.context.get("vpa", ""), err.message) not in self._reported:
                    self._reported.add((str(err.context.get("vpa", "")), err.message))
                    log.warning("vpa.invalid", message=str(err))
        before = {v.key: v for v in self.source.vpas}
        after = {v.key: v for v in parsed}
        self.source.vpas = tuple(parsed)
        if not before:
            self.ctx.refresh(None)
            return
        changed = [v for k in before.keys() | after.keys() for v in (before.get(k), after.get(k)) if v is not None and before.get(k) != after.get(k)]
        targets = {(v.namespace, v.target_kind, v.target_name) for v in changed}
        if targets:  # only the pods whose owner chain reaches a changed VPA's target: O(changed), not O(node)
            owners = self.source.owners
            uids = [
                p.uid
                for p in self.ctx.pods()
                if any((p.namespace, *link) in targets for link in owner_chain(p.namespace, p.owner, owners))
            ]
            if uids:
                self.ctx.refresh(uids)

    def scope(self) -> bool:
        """Read the owner links the node's pods now need and narrow the VPA watch to their VPAs; whether
        the VPA watch changed."""
        pods = self.ctx.pods()
        before = self.owner_links.owners()
        wanted = node_selector(pods, self.owner_links)
        after = self.owner_links.owners()
        if after != before:  # the pods whose chain now reaches further (or less far) are decided again
            self.source.owners = after
            moved = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            uids = [p.uid for p in pods if any((p.namespace, *link) in moved for link in owner_chain(p.namespace, p.owner, {**before, **after}))]
            if uids:
                self.ctx.refresh(uids)
        specs = {"node": WatchSpec(path(f"{GROUP}/{VERSION}", PLURAL), label_selector=wanted)} if wanted else {}
        return self.vpas.want(specs)

    def objects(self) -> list[Mapping[str, Any]]:
        """The VPAs of this node's pods as the watch holds them (for the recommender's publishing step)."""
        return self.vpas.values()

    def _node_changed(self) -> None:
        labels: Mapping[str, Any] = {}
        for node in self.nodes.values():
            labels = (node.get("metadata") or {}).get("labels") or {}
        enabled = labels.get(PANIC_LABEL) != "off"
        if enabled != self.source.enabled:
            self.source.enabled = enabled
            self.ctx.metrics.vpa_enabled.set(1 if enabled else 0)
            log.warning(
                "vpa.panic_button",
                enabled=enabled,
                message=(
                    "VPA-driven changes resumed on this node"
                    if enabled
                    else f"node label {PANIC_LABEL}=off: no new VPA-driven change on this node; nothing applied is touched"
                ),
            )
            self.ctx.refresh(None)

    # ---- the loops ----

    def start(self, stop: threading.Event) -> None:
        node = self.ctx.node or ""
        loops = [
            ("vpa-watch", self._vpa_loop),
            ("vpa-node", lambda s: self._watch(self.api.lister(path("v1", "nodes")), f"node {node}", self.nodes, s, f"metadata.name={node}")),
        ]
        if self.via_api:
            loops.append(("vpa-actuate", self._actuate_loop))
        if self.ctx.settings.vpa.react_cpu_starvation:
            loops.append(("vpa-react", StarvationLoop(self.ctx, self.source, self._free).run))
        loops.append(("vpa-usage", UsageLoop(self.ctx, self.source, self._gone).run))
        self._threads.start(loops, stop)

    def join(self, timeout_s: float) -> None:
        self._threads.join(timeout_s, self.source.wake, self.scope_wake)
        self.vpas.close(timeout_s)

    def _watch(self, call: Any, noun: str, sink: ObjectCache, stop: threading.Event, selector: str | None = None) -> None:
        self._threads.watch(call, noun, sink, stop, selector)

    def _vpa_loop(self, stop: threading.Event) -> None:
        """Wait for the VPA CRD (one warning when missing), then keep the VPA watch on this node's pods'
        owners: narrowed again whenever the pods change (and a link that could not be read is tried again)."""

        call = self.api.lister(path(f"{GROUP}/{VERSION}", PLURAL))

        warned = False
        while not stop.is_set():
            try:
                call(limit=1, _request_timeout=(10, 30))
            except Exception as err:
                api_err = wrap("list verticalpodautoscalers", err)
                if isinstance(api_err, APINotFound):
                    if not warned:
                        log.warning("vpa.crd_missing", message="no VerticalPodAutoscaler CRD in the cluster: VPA in place is off; looking again every 5 minutes")
                        warned = True
                    stop.wait(CRD_RETRY_S)
                    continue
                log.warning("vpa.list_error", error=str(api_err))
                stop.wait(5.0)
                continue
            log.info("vpa.watching", message="VerticalPodAutoscalers found: VPA in place is on")
            break
        while not stop.is_set():
            try:
                self.scope()
            except Exception as err:  # one bad pass must not end VPA in place: log, go on
                log.warning("vpa.scope_failed", error=f"{type(err).__name__}: {err}")
            self.scope_wake.wait(RETRY_SCOPE_S if self.owner_links.pending() else None)
            self.scope_wake.clear()
            stop.wait(SETTLE_S)

    def _gone(self, uids: AbstractSet[str]) -> None:
        """What was last sent, kept only for the pods still on the node."""
        self.patched = {u: t for u, t in self.patched.items() if u in uids}

    def _actuate_loop(self, stop: threading.Event) -> None:
        """The kubelet's node: send each decision as the VPA updater does (pods/resize, then the annotation)."""
        while not stop.is_set():
            self.source.wake.wait(1.0)
            self.source.wake.clear()
            for uid, (ns, name, vpa, targets) in self.source.take_pending().items():
                if self.patched.get(uid) == targets:
                    continue
                self._resize(uid, ns, name, vpa, targets)

    def _annotate(self, ns: str, name: str) -> None:
        """The VPA updater's annotation after an in-place update; needs pods patch, which the default RBAC
        does not grant (least privilege): then one warning, and the resize stands."""
        if self._annotation_forbidden:
            return
        try:
            self.api.patch(
                path("v1", "pods", ns, name),
                {"metadata": {"annotations": {IN_PLACE_ANNOTATION: "true"}}},
                STRATEGIC_MERGE,
                timeout=(10, 30),
            )
        except Exception as err:
            api_err = wrap(f"annotate pod {ns}/{name}", err)
            if isinstance(api_err, APIForbidden):
                self._annotation_forbidden = True
                log.warning("vpa.annotation_forbidden", message=f"no pods patch permission: the {IN_PLACE_ANNOTATION} annotation is not written (the resizes are)")
            else:
                log.warning("vpa.annotation_failed", pod=f"{ns}/{name}", error=str(api_err))

    def _resize(self, uid: str, ns: str, name: str, vpa: str, targets: tuple[ContainerTarget, ...]) -> None:
        """One pods/resize (strategic merge): the pod-level values, when they move, as `spec.resources`,
        and only the containers that move, so that the API server validates and the kubelet admits the whole
        pod at once (docs/vpa-pod-level.md)."""
        pod, moved = split(targets)
        spec: dict[str, Any] = {"resources": api_resources(pod)} if pod is not None else {}
        if moved:
            spec["containers"] = [{"name": t.container, "resources": api_resources(t)} for t in moved]
        body = {"spec": spec}
        started = time.monotonic()
        try:
            self.api.patch(path("v1", "pods", ns, name, "resize"), body, STRATEGIC_MERGE, timeout=(10, 30))
        except Exception as err:
            api_err = err if isinstance(err, APIError) else wrap(f"resize pod {ns}/{name}", err)
            if isinstance(api_err, APIForbidden) or api_err.status == 422:
                # refused at the request (a v1.36 API server checks the node's allocatable there): the
                # kubelet's Infeasible in another form; sent again only for a lower recommendation
                self.source.refused(uid, f"{ns}/{name}", vpa, targets, f"{api_err.status} {api_err.reason}")
                return
            self.ctx.metrics.vpa_resizes.labels("error").inc()
            log.warning("vpa.resize_failed", pod=f"{ns}/{name}", vpa=vpa, error=str(api_err))
            return
        self.patched[uid] = targets
        self.source.sent_through_api(uid, vpa, targets)
        self.ctx.metrics.vpa_resizes.labels("sent").inc()
        self._annotate(ns, name)
        log.info("vpa.resized", pod=f"{ns}/{name}", vpa=vpa, via="pods/resize", ms=round((time.monotonic() - started) * 1000, 1),
                 spec=json.dumps(spec))


def vpa_component(ctx: DaemonContext) -> Component | None:
    """On when `vpa.enabled` and the pods come from the API; adds the VPA source before the daemon starts."""
    settings = ctx.settings.vpa
    if not settings.enabled:
        return None
    if ctx.api is None:
        log.info("vpa.off", message="VPA in place needs the API server (pods from a directory here)")
        return None
    via_api = not ctx.ownership.writes(Thing.CONTAINER_RESIZES)
    source = VPASource(opts=settings.options(), propose_changes=not via_api, usage={}, reactor=Reactor(oom=settings.react_oom))
    kept, warning = load(ctx.settings.state_dir)  # applied targets and refused resizes, across restarts
    if warning:
        log.warning("vpa.state", message=warning)
    source.restore(kept if not via_api else ActuatorState(blocked=kept.blocked, floors=kept.floors))
    if ctx.limit_ranges is not None:  # LimitRange type Pod caps the pod level (agent.daemon.limitranges reads them)
        ranges = ctx.limit_ranges
        source.pod_bounds = lambda namespace: pod_bounds(ranges.of(namespace))
    ctx.sources.append(source)
    ctx.metrics.vpa_enabled.set(1)
    component = VPAComponent(ctx, source, via_api)
    ctx.vpas = component.objects
    return component
