"""A VerticalPodAutoscaler (`autoscaling.k8s.io/v1`) as the node agent needs it, parsed and validated.

Why a model of its own: the agent reads VPAs from the API (raw JSON: the kubernetes client has no type
for a CRD) and must never act on a half-understood object, so every field it uses is checked here once
and a bad VPA becomes one `VPAParseError` naming the VPA and the field (agent.vpa.parse). Field names and defaults are
VPA's (pkg/apis/autoscaling.k8s.io/v1/types.go): updateMode defaults to Recreate, controlledResources to
[cpu, memory], controlledValues to RequestsAndLimits, a container policy's mode to Auto. The pod-level
policy and recommendation are AEP-7571's (kubernetes/autoscaler PR #9988, not merged: docs/vpa-pod-level.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from agent.core.model import EMPTY, Resources
from agent.infra.errors import PermanentError

ACTUATOR_ANNOTATION: Final = "kube-cgroup-agent.io/vpa-actuator"  # value "node": the agent may actuate it
# AEP-7571's pod-level policy and recommendation where the VPA CRD cannot hold them yet (docs/vpa-pod-level.md)
POD_POLICY_ANNOTATION: Final = "kube-cgroup-agent.io/vpa-pod-policy"
POD_RECOMMENDATION_ANNOTATION: Final = "kube-cgroup-agent.io/vpa-pod-recommendation"
WILDCARD: Final = "*"


class UpdateMode(enum.StrEnum):
    OFF = "Off"
    INITIAL = "Initial"
    RECREATE = "Recreate"
    IN_PLACE_OR_RECREATE = "InPlaceOrRecreate"
    IN_PLACE = "InPlace"
    AUTO = "Auto"  # deprecated, the same as Recreate


class ControlledValues(enum.StrEnum):
    REQUESTS_AND_LIMITS = "RequestsAndLimits"
    REQUESTS_ONLY = "RequestsOnly"


class PodScalingMode(enum.StrEnum):
    """AEP-7571's podPolicy.mode."""

    AUTO = "Auto"
    OFF = "Off"


class VPAParseError(PermanentError, ValueError):
    def __init__(self, vpa: str, message: str) -> None:
        super().__init__(f"VerticalPodAutoscaler {vpa}: {message}", vpa=vpa)
        self.message = message


@dataclass(frozen=True, slots=True)
class ContainerPolicy:
    container: str  # a container name, or "*" for every container without a policy of its own
    off: bool = False  # mode: Off (the container is never changed)
    min_allowed: Resources = EMPTY
    max_allowed: Resources = EMPTY
    controlled: frozenset[str] = frozenset({"cpu", "memory"})
    values: ControlledValues = ControlledValues.REQUESTS_AND_LIMITS


@dataclass(frozen=True, slots=True)
class Recommendation:
    container: str
    target: Resources
    lower: Resources = EMPTY
    upper: Resources = EMPTY


@dataclass(frozen=True, slots=True)
class PodPolicy:
    """AEP-7571's `spec.resourcePolicy.podPolicy` (or the same object in POD_POLICY_ANNOTATION, where the
    CRD lacks the field): how the pod-level resources are sized. `mode` None: not stated (the node
    actuator then sizes a pod that sets pod-level resources, the VPA's opt-in being explicit)."""

    mode: PodScalingMode | None = None
    min_allowed: Resources = EMPTY
    max_allowed: Resources = EMPTY
    controlled: frozenset[str] = frozenset({"cpu", "memory"})
    values: ControlledValues = ControlledValues.REQUESTS_AND_LIMITS
    source: str = "spec"  # "spec" or "annotation"


@dataclass(frozen=True, slots=True)
class PodRecommendation:
    """AEP-7571's `status.recommendation.podRecommendations` (or POD_RECOMMENDATION_ANNOTATION); `source`
    "containers" when summed from the containers' recommendations (agent.vpa.podlevel)."""

    target: Resources
    lower: Resources = EMPTY
    upper: Resources = EMPTY
    uncapped: Resources = EMPTY
    source: str = "status"  # "status", "annotation" or "containers"


@dataclass(frozen=True, slots=True)
class VPA:
    namespace: str
    name: str
    target_kind: str
    target_name: str
    mode: UpdateMode = UpdateMode.RECREATE
    opted_in: bool = False  # the actuator annotation says "node"
    recommenders: tuple[str, ...] = ()
    policies: tuple[ContainerPolicy, ...] = ()
    recommendations: tuple[Recommendation, ...] = ()
    pod_policy: PodPolicy | None = None
    pod_recommendation: PodRecommendation | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def policy_for(self, container: str) -> ContainerPolicy | None:
        """The container's own policy, else the "*" one, else none (VPA's GetContainerResourcePolicy)."""
        default = None
        for p in self.policies:
            if p.container == container:
                return p
            if p.container == WILDCARD:
                default = p
        return default

    def recommendation_for(self, container: str) -> Recommendation | None:
        return next((r for r in self.recommendations if r.container == container), None)
