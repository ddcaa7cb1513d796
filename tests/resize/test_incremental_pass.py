"""A pod event's pass (only the pods that changed or have a resize queued, the tiers from running
totals) leaves the kernel as a node-wide pass would; the cached checkpoint encoder is byte-identical."""

from __future__ import annotations

from pathlib import Path

from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest


def _tree(node: ResizeNode) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(Path(node.tree.root).rglob("*")):
        if path.is_file() and path.name.startswith(("cpu.", "memory.limit")):
            out[str(path.relative_to(node.tree.root))] = path.read_text().strip()
    return out


def test_an_event_pass_leaves_the_same_kernel_state_as_a_full_pass(node: ResizeNode) -> None:
    for name, cpu in (("a", "500m"), ("b", "250m"), ("c", "1")):
        node.add_pod(manifest(name, [ctr("app", lim={"cpu": cpu, "memory": "256Mi"})]))
    node.add_pod(manifest("d", [ctr("app", req={"cpu": "100m", "memory": "64Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    for k, (pod, cpu, mem) in enumerate(
        (("a", "1", "384Mi"), ("d", "300m", "128Mi"), ("b", "750m", "256Mi"))
    ):
        if pod == "d":
            view = node.resize(pod, {"app": {"requests": {"cpu": cpu, "memory": mem}}})
        else:
            view = node.resize(pod, {"app": {"limits": {"cpu": cpu, "memory": mem}}})
        eng.update(view)
        eng.reconcile(full=False)
        status = eng.status(view.uid)
        assert status is not None and status.state is ResizeState.DONE, (k, status)
        after_event = _tree(node)
        eng.observe(node.views())
        full = eng.reconcile(full=True)
        assert full.writes == 0, full.plan().steps  # nothing left for the node-wide pass
        assert _tree(node) == after_event
    assert node.violations == []
