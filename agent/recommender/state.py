"""The node's recommender state: one history per (pod, container), fed by samples, turned into
recommendations, persisted and merged. Pure (the store and the sampler are the shell)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import Recommendation, recommend
from agent.recommender.model import ContainerHistory
from agent.recommender.trace import Sample

FORMAT_VERSION: Final = 1
Key = tuple[str, str]  # (namespace/pod, container)


@dataclass(frozen=True, slots=True)
class ContainerRecommendation:
    pod: str
    container: str
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

    def recommendations(self) -> list[ContainerRecommendation]:
        per_pod: dict[str, int] = {}
        for pod, _ in self.histories:
            per_pod[pod] = per_pod.get(pod, 0) + 1
        return [
            ContainerRecommendation(pod, container, recommend(h, self.settings, per_pod[pod]))
            for (pod, container), h in sorted(self.histories.items())
            if not (h.cpu.is_empty() and h.memory.is_empty())
        ]

    def to_dict(self) -> dict[str, object]:
        return {
            "version": FORMAT_VERSION,
            "containers": [
                {"pod": pod, "container": c, "requests": list(self.requests.get((pod, c), (None, None))), **h.to_dict()}
                for (pod, c), h in sorted(self.histories.items())
            ],
        }

    @classmethod
    def from_dict(cls, settings: RecommenderSettings, data: object) -> RecommenderState:
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            found = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"not a version {FORMAT_VERSION} recommender state (found {found!r})")
        state = cls(settings)
        containers = data.get("containers")
        if not isinstance(containers, list):
            raise ValueError("containers must be a list")
        for item in containers:
            if not isinstance(item, dict) or not isinstance(item.get("pod"), str) or not isinstance(item.get("container"), str):
                raise ValueError("each container needs pod and container names")
            key = (item["pod"], item["container"])
            state.histories[key] = ContainerHistory.from_dict(settings, item)
            req = item.get("requests")
            if isinstance(req, list) and len(req) == 2 and all(v is None or isinstance(v, int) for v in req):
                state.requests[key] = (req[0], req[1])
        return state
