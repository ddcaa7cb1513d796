"""The rollout's slots: Leases `kcg-rollout-<kind>-<name>-<i>`, i below the workload's budget of pods
unavailable at once.

Why Leases: the budget is the workload's, across nodes, and nodes never talk to each other; a node
updates a pod only while it holds one of the budget's Leases, so no two nodes exceed it. A Lease is
renewed while the update runs (a live agent's slot never expires) and released when the pod is done;
a crashed agent's slot expires on its own (nothing is left to clean up).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from agent.infra.lease import acquire_lease, release
from agent.rollout.order import Rollout, slots
from agent.rollout.workload import Workload

LEASE_S: Final = 30
LEASE_LABEL: Final = "kube-cgroup-agent.io/rollout"


class Slots:
    def __init__(self, api: Any, node: str) -> None:
        self.api = api  # kubernetes.client.ApiClient
        self.node = node

    def _holder(self, pod: str) -> str:
        return f"{self.node}/{pod}"

    def take(self, w: Workload, pod: str, rollout: Rollout, states: Sequence[Any]) -> str | None:
        """A free slot for `pod`'s update (its Lease's name), or None when every slot is held."""
        base = f"kcg-rollout-{w.kind.value.lower()}-{w.name}"
        me = next((s for s in states if s.name == pod), None)
        free = slots(rollout, states) + (1 if me is not None and not me.updating and (me.terminating or not me.ready) else 0)
        for i in range(free):  # a pod unavailable already costs the budget nothing more
            name = f"{base}-{i}"[:253]
            if acquire_lease(self.api, w.namespace, name, self._holder(pod), LEASE_S, time.time,
                             {LEASE_LABEL: f"{w.kind.value.lower()}.{w.name}"}).held:
                return name
        return None

    def keep(self, w: Workload, name: str, pod: str, renewed: float) -> float:
        """Renew the slot when a third of its Lease has gone since `renewed` (monotonic); when it was
        renewed last."""
        if time.monotonic() - renewed < LEASE_S / 3:
            return renewed
        acquire_lease(self.api, w.namespace, name, self._holder(pod), LEASE_S, time.time)
        return time.monotonic()

    def release(self, w: Workload, name: str, pod: str) -> None:
        release(self.api, w.namespace, name, self._holder(pod))
