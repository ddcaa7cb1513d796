"""The Node the daemon under test runs on, as the fake API server holds it: one name for the harness that
starts the daemon, the fakes that place pods on it and the tests that look for them there."""

from __future__ import annotations

from typing import Any

NODE = "node-1"
_GI = 1 << 30
_MI = 1 << 20


def node_object() -> dict[str, Any]:
    """A Node whose allocatable is 100Mi (the default hard eviction threshold) below what kubepods gets."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "resourceVersion": "1"},
        "status": {
            "capacity": {"cpu": "8", "memory": str(16 * _GI + 512 * _MI)},
            "allocatable": {"cpu": "8", "memory": str(16 * _GI - 100 * _MI)},
            "nodeInfo": {"kubeletVersion": ""},
        },
    }
