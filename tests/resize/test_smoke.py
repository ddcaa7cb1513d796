from __future__ import annotations

from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode, ctr, manifest


def test_guaranteed_cpu_increase(node: ResizeNode) -> None:
    node.add_pod(manifest("g1", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    r = eng.reconcile()
    print(r.plan().steps, r.errors)
    node.events.clear()
    node.resize("g1", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    eng.observe(node.views())
    r = eng.reconcile()
    for e in node.events:
        print(e)
    print(eng.statuses())
    assert node.violations == []
    st = eng.status(node.view("g1").uid)
    assert st is not None and st.state is ResizeState.DONE
