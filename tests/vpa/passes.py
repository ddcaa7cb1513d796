"""The daemon's passes over one pod, in the VPA tests that drive the real resize engine."""

from __future__ import annotations

from collections.abc import Callable

from agent.core.model import PodView
from agent.resize.engine import ResizeEngine
from agent.resize.types import ResizeState


def until_done(eng: ResizeEngine, view: Callable[[], PodView], passes: int = 4) -> ResizeState | None:
    """Up to `passes` of the daemon's passes, each with the pod as the sources derive it; the last state."""
    state = None
    for _ in range(passes):
        eng.update(view())
        eng.reconcile()
        st = eng.status(view().uid)
        state = st.state if st is not None else None
        if state is ResizeState.DONE:
            break
    return state
