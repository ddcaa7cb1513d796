"""A tier's qos-reserved memory limit changed by another writer (the kubelet's QoS pass, from its own list
of active pods): the drift note says what the change means in memory requests, so the pod the two lists
disagree on can be named."""

from __future__ import annotations

import pytest

from agent.core.compute import NodeComputation
from agent.core.diff import DesiredFile, FileDiff, NodeDiff, Owner
from agent.core.ownership import Thing, resolve
from agent.daemon.drift import DriftTracker, reserved_gap
from agent.daemon.gate import Gate
from cgroupfs.layout import FileSetting
from cgroupfs.types import CgroupName, CgroupVersion, Controller

MI = 1 << 20
AGENT = 24571858944  # the BestEffort limit the agent wrote (realk8s-node, qosReserved memory 50 %)


@pytest.mark.parametrize(
    ("thing", "current", "desired", "percent", "says"),
    [
        # the kubelet counted a 32 MiB request the agent did not: at 50 % its limit is 16 MiB lower
        (Thing.QOS_RESERVED_MEMORY, str(AGENT - 16 * MI), str(AGENT), 50, "about 32.0 MiB more"),
        (Thing.QOS_RESERVED_MEMORY, str(AGENT + 8 * MI), str(AGENT), 100, "about 8.0 MiB less"),
        (Thing.QOS_RESERVED_MEMORY, str(AGENT - 4096), str(AGENT), 50, "about 0.0 MiB more"),  # a page
        (Thing.QOS_RESERVED_MEMORY, "max", str(AGENT), 50, ""),  # not a number: nothing to say
        (Thing.QOS_RESERVED_MEMORY, None, str(AGENT), 50, ""),  # the file is gone
        (Thing.QOS_RESERVED_MEMORY, str(AGENT - 16 * MI), str(AGENT), None, ""),  # no qosReserved
        (Thing.QOS_RESERVED_MEMORY, str(AGENT), str(AGENT), 50, ""),
        (Thing.QOS_TIERS, "1024", "2048", 50, ""),  # not a reserved limit
    ],
)
def test_the_gap_in_memory_requests(
    thing: Thing, current: str | None, desired: str, percent: int | None, says: str
) -> None:
    text = reserved_gap(thing, current, desired, percent)
    if says:
        assert says in text and f"qosReserved memory {percent} %" in text
    else:
        assert text == ""


def test_the_reapplied_note_says_it() -> None:
    path = "memory/kubepods/besteffort/memory.limit_in_bytes"
    setting = FileSetting(
        CgroupName(("kubepods", "besteffort")), Controller.MEMORY, CgroupVersion.V1,
        "memory/kubepods/besteffort", "memory.limit_in_bytes", str(AGENT),
    )
    changed = FileDiff(DesiredFile(setting, Owner.TIER), str(AGENT - 16 * MI), True)
    node = NodeDiff((changed,), (), (), NodeComputation((), (), (), ()))
    gate = Gate(resolve({}, None, {}), DriftTracker(3, 10.0), False, qos_reserved_memory_percent=50)
    gate.drift.decide(path, str(AGENT), 0.0)
    gate.wrote([(path, str(AGENT))], 0.0)  # the agent's value, then someone else's
    [note] = gate.filter(node, 3600.0).notes
    assert (note.action, note.thing) == ("reapplied", "qosReservedMemory")
    assert note.message.endswith(
        "(revert 1 of 3); that writer counted about 32.0 MiB more of memory requests than the agent"
        " (qosReserved memory 50 %)"
    )
