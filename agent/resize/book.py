"""The node's pods and their resize records, as the engine holds them between pod events.

Why a book of its own: every pod event changes it, and neither an event nor a pass may cost O(node).
So beside the pods (each with its place in the node's order) and the immutable records
(`state.EngineState`, which only `change` replaces) it keeps the indexes that let a pass find its few
pods: the records that may differ from the ones last saved (`touched`), the pods with a resize state or
a restart (`active`: every other record is a pod never resized), and the pods in a terminal phase.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from agent.core.compute.node import TERMINAL_PHASES
from agent.core.model import PodUID, PodView
from agent.resize import state as sm
from agent.resize.allocation import with_allocation
from agent.resize.types import ResizeStatus


class PodBook:
    def __init__(self) -> None:
        self.state = sm.EngineState()
        self.pods: dict[PodUID, PodView] = {}
        self.order: dict[PodUID, int] = {}  # each pod's place in the node's order (arrival)
        self._next = 0
        # pods ending (a terminal phase, or being deleted; few): checked for their cgroup
        self.terminal: set[PodUID] = set()
        self.touched: set[PodUID] = set()  # records that may differ from the ones last saved
        self.active: set[PodUID] = set()  # records with a resize state or a restart

    def restore(self, records: Iterable[sm.PodRecord]) -> None:
        """Start over from these records, with no pod seen yet (they arrive next, in the node's order)."""
        self.change(sm.restore(records))
        self.pods = {}
        self.order = {}
        self.terminal.clear()

    def departed(self, present: Collection[PodUID]) -> list[PodUID]:
        """The pods held (or with a record) that are not in `present`, the node's full list."""
        return [u for u in (*self.pods, *self.state.records) if u not in present]

    def update(self, pod: PodView) -> bool:
        """One pod update, in arrival order; whether its view is new (not the very object held)."""
        changed = self.pods.get(pod.uid) is not pod
        if pod.uid not in self.order:
            self.order[pod.uid] = self._next
            self._next += 1
        self.pods[pod.uid] = pod
        if pod.phase in TERMINAL_PHASES or pod.deleting:
            self.terminal.add(pod.uid)
        else:
            self.terminal.discard(pod.uid)
        self.change(sm.observe_pod(self.state, pod), (pod.uid,))
        return changed

    def remove(self, uid: PodUID) -> None:
        self.pods.pop(uid, None)
        self.order.pop(uid, None)
        self.terminal.discard(uid)
        self.change(sm.remove_pod(self.state, uid), (uid,))

    def change(self, state: sm.EngineState, uids: Collection[PodUID] | None = None) -> None:
        """The one way the state changes: `uids` are the pods whose records may have changed (None:
        any), kept in the indexes."""
        self.state = state
        records = state.records
        if uids is None:
            self.active = {u for u, r in records.items() if r.state is not None or r.restarted}
            self.touched.update(records)
            return
        self.touched.update(uids)
        for uid in uids:
            rec = records.get(uid)
            if rec is not None and (rec.state is not None or rec.restarted):
                self.active.add(uid)
            else:
                self.active.discard(uid)

    def queue(self) -> list[sm.PodRecord]:
        """`sm.queue` over the active pods only (a queued record always has a state)."""
        return sm.queue(self.state, self.active)

    def in_order(self, uids: Iterable[PodUID]) -> list[PodUID]:
        """The held pods among `uids`, in the node's order."""
        return sorted((u for u in uids if u in self.pods), key=self.order.__getitem__)

    # ---- state out ----

    def status(self, uid: PodUID) -> ResizeStatus | None:
        rec = self.state.records.get(uid)
        return rec.status() if rec is not None else None

    def statuses(self) -> tuple[ResizeStatus, ...]:
        records = self.state.records
        out = [records[u].status() for u in self.active]
        return tuple(sorted((s for s in out if s is not None), key=lambda s: s.pod))

    def effective_pods(self) -> tuple[PodView, ...]:
        """The node's pods at their allocated values: what every cgroup value is computed from."""
        out = []
        for uid, pod in self.pods.items():
            rec = self.state.records.get(uid)
            out.append(with_allocation(pod, rec.allocated) if rec is not None else pod)
        return tuple(out)

    def waiting_restarts(self, rec: sm.PodRecord) -> set[str]:
        """Containers stopped for RestartContainer that have not come back yet (same container ID)."""
        pod = self.pods.get(rec.uid)
        if pod is None:
            return set()
        out = set()
        for name, cid in rec.restarted.items():
            st = pod.status_of(name)
            if st is not None and st.container_id == cid:
                out.add(name)
        return out

