"""The soak's pod population and its event mix: pods of every QoS class with one to three containers,
created, resized (each container keeping its style, so its QoS class), status-updated and deleted, and
every event and fault journaled with its time; the state of one run (who is alive, what was sent)."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.daemon.harness import Env, api_pod
from tests.reliability.soak_faults import FAULTS
from tests.reliability.soak_watchers import Prober
from tests.resize.manifests import ctr, manifest

CPU_MILLI = tuple(range(20, 201, 10))
MEMORY_MI = tuple(range(32, 257, 16))


@dataclass(frozen=True)
class Shape:
    """How a pod's containers are resourced; a resize keeps each container's style, so its QoS class."""

    styles: tuple[str, ...]  # per container c0, c1...: guaranteed | burstable | requests | none

    @property
    def resizable(self) -> bool:
        return "none" not in self.styles


def _shape(rng: random.Random) -> Shape:
    n = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
    qos = rng.choices(("guaranteed", "burstable", "besteffort"), weights=(4, 4, 2))[0]
    if qos == "guaranteed":
        return Shape(("guaranteed",) * n)
    if qos == "besteffort":
        return Shape(("none",) * n)
    return Shape(tuple(rng.choice(("burstable", "requests")) for _ in range(n)))


def _resources(rng: random.Random, style: str, avoid_cpu: int | None = None) -> dict[str, Any]:
    """A container's resources in its style; the CPU request differs from `avoid_cpu`, so every resize
    moves a kernel value (cpu.shares at least) that the probe can see."""
    cpu = rng.choice([c for c in CPU_MILLI if c != avoid_cpu])
    mem = rng.choice(MEMORY_MI)
    asked = {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}
    if style == "guaranteed":
        return {"limits": asked}
    if style == "requests":
        return {"requests": asked}
    if style == "burstable":
        limit = {"cpu": f"{cpu + rng.choice((50, 100, 200))}m", "memory": f"{mem + rng.choice((0, 32, 64))}Mi"}
        return {"requests": asked, "limits": limit}
    return {}


def _cpu_request(resources: Mapping[str, Any]) -> int | None:
    asked = resources.get("requests") or resources.get("limits") or {}
    text = asked.get("cpu")
    return int(text.removesuffix("m")) if isinstance(text, str) else None


def _split(resources: Mapping[str, Any]) -> dict[str, Any]:
    return {"req": resources.get("requests"), "lim": resources.get("limits")}


@dataclass
class Run:
    """The state of one soak: the node, who is alive, what was sent."""

    env: Env
    rng: random.Random
    target: int
    prober: Prober | None = None
    shapes: dict[str, Shape] = field(default_factory=dict)
    live: list[str] = field(default_factory=list)
    resized: set[str] = field(default_factory=set)
    sent: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    serial: int = 0
    journal: list[dict[str, Any]] = field(default_factory=list)  # what was sent and injected, when

    def note(self, what: str, name: str, **more: Any) -> None:
        self.journal.append({"t": round(time.time(), 4), "what": what, "name": name, **more})

    def applied(self, pod: str, ms: float) -> None:
        self.note("applied", pod, ms=round(ms, 2))

    def create(self) -> str:
        name = f"soak-{self.serial}"
        self.serial += 1
        shape = _shape(self.rng)
        containers = [ctr(f"c{i}", **_split(_resources(self.rng, s))) for i, s in enumerate(shape.styles)]
        self.env.node.add_pod(manifest(name, containers))
        self.shapes[name] = shape
        self.live.append(name)
        self.env.publish(name)
        return name

    def delete(self, name: str) -> None:
        """The kubelet tears the pod down, then the API object goes (a pod deleted gracefully)."""
        uid = self.env.uid(name)
        self.env.node.remove_pod(name)
        self.env.cluster.delete(uid)
        self.live.remove(name)
        self.resized.discard(name)
        del self.shapes[name]

    def resize(self, name: str, t_s: float, probe: bool) -> None:
        shape = self.shapes[name]
        i = self.rng.randrange(len(shape.styles))
        spec = self.env.node.pods[name].raw["spec"]["containers"][i]
        new = _resources(self.rng, shape.styles[i], _cpu_request(spec.get("resources") or {}))
        self.env.node.resize(name, {spec["name"]: new})
        self.resized.add(name)
        if probe and self.prober is not None:
            with self.prober.timing(name, t_s):
                self.env.publish(name)
        else:
            self.env.publish(name)

    def status_update(self, name: str) -> None:
        """A kubelet status write: the pod's IP and a container's readiness, nothing of its spec."""
        pod = api_pod(self.env.node, name)
        pod["status"]["podIP"] = f"10.{self.serial % 250}.{len(self.live) % 250}.{self.sent['status'] % 250}"
        pod["status"]["containerStatuses"][0]["ready"] = self.sent["status"] % 2 == 0
        self.env.cluster.apply(pod)

    def pick(self, resizable: bool = False) -> str | None:
        """A live pod that no probe is timing (and, when asked, that can be resized)."""
        for _ in range(20):
            name = self.rng.choice(self.live)
            if (self.prober is None or not self.prober.busy(name)) and (
                not resizable or self.shapes[name].resizable
            ):
                return name
        return None

    def event(self, t_s: float, probe: bool) -> str:
        """One event of the mix (15 % churn, 10 % status, 75 % resize), journaled; returns its kind. A
        resize with every resizable pod under a probe becomes a status update: the rate holds."""
        kind, name = self._event(t_s, probe)
        self.note(kind, name, **({"probe": True} if kind == "resize" and probe else {}))
        return kind

    def _event(self, t_s: float, probe: bool) -> tuple[str, str]:
        roll = self.rng.random()
        if roll < 0.15 and len(self.live) < self.target:
            return "create", self.create()
        if roll < 0.15 and (name := self.pick()) is not None:
            self.delete(name)
            return "delete", name
        if roll >= 0.25 and (name := self.pick(resizable=True)) is not None:
            self.resize(name, t_s, probe)
            return "resize", name
        name = self.rng.choice(self.live)
        self.status_update(name)
        return "status", name

    def inject(self, kind: str) -> None:
        FAULTS[kind](self.env.cluster, self.env.cri)
        self.faults[kind] += 1
        self.note("fault", kind)
