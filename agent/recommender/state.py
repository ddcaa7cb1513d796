"""The node's recommender state: one history per (pod, container), and per (pod, POD) the pod cgroup's of a
pod that sets pod-level resources, fed by samples, turned into recommendations, persisted and merged. Pure
(the store and the sampler are the shell).

The file keeps pod histories in a list of their own (`pods`), beside `containers`: an agent of an older
release reading it ignores them rather than taking the pod for a container named ""."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from agent.core.model import POD
from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import Recommendation, recommend
from agent.recommender.model import ContainerHistory
from agent.recommender.trace import Sample

FORMAT_VERSION: Final = 1
Key = tuple[str, str]  # (namespace/pod, container or POD)


@dataclass(frozen=True, slots=True)
class ContainerRecommendation:
    pod: str
    container: str  # POD: the pod level's
    recommendation: Recommendation


@dataclass(slots=True)
class RecommenderState:
    settings: RecommenderSettings
    histories: dict[Key, ContainerHistory] = field(default_factory=dict)
    requests: dict[Key, tuple[int | None, int | None]] = field(default_factory=dict)  # (cpu milli, memory)

    def history(self, key: Key) -> ContainerHistory:
        h = self.histories.get(key)
        if h is None:
            h = self.histories[key] = ContainerHistory(self.settings)
        return h

    def observe(self, sample: Sample) -> None:
        key = (sample.pod, sample.container)
        if sample.request_cpu_milli is not None or sample.request_memory is not None:
            cpu, mem = self.requests.get(key, (None, None))
            self.requests[key] = (
                sample.request_cpu_milli if sample.request_cpu_milli is not None else cpu,
                sample.request_memory if sample.request_memory is not None else mem,
            )
            self.history(key)._seen(sample.ts)
        h = self.histories.get(key) or self.history(key)
        if sample.cpu is not None:
            h.add_cpu(sample.ts, sample.cpu)
        if sample.memory is not None:
            h.add_memory(sample.ts, sample.memory)
        if sample.oom:
            h.record_oom(sample.ts, float(self.requests.get(key, (None, None))[1] or 0))

    def observe_all(self, samples: Iterable[Sample]) -> None:
        for s in samples:
            self.observe(s)

    def forget_older_than(self, now: float) -> list[Key]:
        """Containers not seen for longer than the memory window (8 days by default) are dropped: the memory
        used stays bounded by the containers alive in that window."""
        cutoff = now - self.settings.memory_window_s
        gone = [k for k, h in self.histories.items() if h.last_seen is not None and h.last_seen < cutoff]
        for k in gone:
            del self.histories[k]
            self.requests.pop(k, None)
        return gone

    def containers_in(self, pod: str) -> int:
        """The containers of a pod with a history: they share VPA's per-pod minimums (the pod level has
        them whole)."""
        return sum(1 for p, c in self.histories if p == pod and c != POD)

    def recommendations(self) -> list[ContainerRecommendation]:
        per_pod: dict[str, int] = {}
        for pod, c in self.histories:
            per_pod[pod] = per_pod.get(pod, 0) + (c != POD)
        return [
            ContainerRecommendation(pod, container, recommend(h, self.settings, 1 if container == POD else per_pod[pod]))
            for (pod, container), h in sorted(self.histories.items())
            if not (h.cpu.is_empty() and h.memory.is_empty())
        ]

    def to_dict(self) -> dict[str, object]:
        def item(pod: str, c: str, h: ContainerHistory) -> dict[str, object]:
            return {"pod": pod, **({} if c == POD else {"container": c}),
                    "requests": list(self.requests.get((pod, c), (None, None))), **h.to_dict()}

        items = sorted(self.histories.items())
        out: dict[str, object] = {"version": FORMAT_VERSION,
                                  "containers": [item(p, c, h) for (p, c), h in items if c != POD]}
        if any(c == POD for _, c in self.histories):
            out["pods"] = [item(p, c, h) for (p, c), h in items if c == POD]
        return out

    @classmethod
    def from_dict(cls, settings: RecommenderSettings, data: object) -> RecommenderState:
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            found = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"not a version {FORMAT_VERSION} recommender state (found {found!r})")
        state = cls(settings)
        containers, pods = data.get("containers"), data.get("pods", [])
        if not isinstance(containers, list) or not isinstance(pods, list):
            raise ValueError("containers and pods must be lists")
        for item in [*containers, *({**p, "container": POD} if isinstance(p, dict) else p for p in pods)]:
            if not isinstance(item, dict) or not isinstance(item.get("pod"), str) or not isinstance(item.get("container"), str):
                raise ValueError("each container needs pod and container names")
            key = (item["pod"], item["container"])
            state.histories[key] = ContainerHistory.from_dict(settings, item)
            req = item.get("requests")
            if isinstance(req, list) and len(req) == 2 and all(v is None or isinstance(v, int) for v in req):
                state.requests[key] = (req[0], req[1])
        return state
