"""A VerticalPodAutoscaler object (raw JSON from the API) to `agent.vpa.model.VPA`, or one VPAParseError.

AEP-7571's pod-level fields (`spec.resourcePolicy.podPolicy`, `status.recommendation.podRecommendations`)
are read where the object has them; a CRD that does not know them prunes them, so the same objects are
also read from the annotations POD_POLICY_ANNOTATION and POD_RECOMMENDATION_ANNOTATION (JSON), the field
winning over the annotation (docs/vpa-pod-level.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent.core.model import Resources
from agent.pods import quantity
from agent.vpa.model import (
    ACTUATOR_ANNOTATION,
    POD_POLICY_ANNOTATION,
    POD_RECOMMENDATION_ANNOTATION,
    VPA,
    ContainerPolicy,
    ControlledValues,
    PodPolicy,
    PodRecommendation,
    PodScalingMode,
    Recommendation,
    UpdateMode,
    VPAParseError,
)


def _map(v: object, where: str, key: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise VPAParseError(key, f"{where} must be an object")
    return v


def _resources(v: object, where: str, key: str) -> Resources:
    """cpu and memory of a ResourceList (other names are VPA's business, not the node's)."""
    raw = _map(v, where, key)
    try:
        cpu = quantity.to_milli(raw["cpu"], f"{where}.cpu") if "cpu" in raw else None
        memory = quantity.to_int(raw["memory"], f"{where}.memory") if "memory" in raw else None
    except quantity.QuantityError as err:
        raise VPAParseError(key, str(err)) from err
    return Resources(cpu, memory)


def _container_entry(v: object, where: str, key: str) -> tuple[Mapping[str, Any], str]:
    """A list entry about one container (a policy, a recommendation): the object and its containerName."""
    entry = _map(v, where, key)
    container = entry.get("containerName")
    if not isinstance(container, str) or not container:
        raise VPAParseError(key, f"{where}.containerName is missing")
    return entry, container


def _controls(p: Mapping[str, Any], where: str, key: str) -> tuple[frozenset[str], ControlledValues]:
    """controlledResources (default [cpu, memory]) and controlledValues of a container or pod policy."""
    controlled = p.get("controlledResources")
    if controlled is not None and not (
        isinstance(controlled, list) and all(isinstance(c, str) for c in controlled)
    ):
        raise VPAParseError(key, f"{where}.controlledResources must be a list of resource names")
    try:
        values = ControlledValues(p.get("controlledValues") or "RequestsAndLimits")
    except ValueError as err:
        raise VPAParseError(
            key,
            f"{where}.controlledValues {p.get('controlledValues')!r} is not RequestsAndLimits or RequestsOnly",
        ) from err
    return (frozenset(controlled) if controlled is not None else frozenset({"cpu", "memory"})), values


def _from_annotation(annotations: Mapping[str, Any], name: str, key: str) -> Mapping[str, Any] | None:
    """The JSON object an annotation holds (None when absent)."""
    text = annotations.get(name)
    if text is None:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError as err:
        raise VPAParseError(key, f"annotation {name} is not valid JSON: {err}") from err
    return _map(value, f"annotation {name}", key)


def _pod_policy(resource_policy: Mapping[str, Any], annotations: Mapping[str, Any], key: str) -> PodPolicy | None:
    """AEP-7571's podPolicy: the spec's when the CRD holds it, else the annotation's (same object)."""
    raw, where, source = resource_policy.get("podPolicy"), "spec.resourcePolicy.podPolicy", "spec"
    if raw is None:
        raw, where, source = _from_annotation(annotations, POD_POLICY_ANNOTATION, key), f"annotation {POD_POLICY_ANNOTATION}", "annotation"
    if raw is None:
        return None
    p = _map(raw, where, key)
    mode_text = p.get("mode")
    try:
        mode = PodScalingMode(mode_text) if mode_text is not None else None
    except ValueError as err:
        raise VPAParseError(key, f"{where}.mode {mode_text!r} is not Auto or Off") from err
    controlled, values = _controls(p, where, key)
    return PodPolicy(
        mode,
        _resources(p.get("minAllowed"), f"{where}.minAllowed", key),
        _resources(p.get("maxAllowed"), f"{where}.maxAllowed", key),
        controlled,
        values,
        source,
    )


def _pod_recommendation(
    recommendation: Mapping[str, Any], annotations: Mapping[str, Any], key: str
) -> PodRecommendation | None:
    """AEP-7571's podRecommendations: the status's when the CRD holds it, else the annotation's."""
    raw, where, source = recommendation.get("podRecommendations"), "status.recommendation.podRecommendations", "status"
    if raw is None:
        raw, where, source = (
            _from_annotation(annotations, POD_RECOMMENDATION_ANNOTATION, key),
            f"annotation {POD_RECOMMENDATION_ANNOTATION}",
            "annotation",
        )
    if raw is None:
        return None
    r = _map(raw, where, key)
    fields = {f: _resources(r.get(f), f"{where}.{f}", key) for f in ("target", "lowerBound", "upperBound", "uncappedTarget")}
    return PodRecommendation(
        fields["target"], fields["lowerBound"], fields["upperBound"], fields["uncappedTarget"], source
    )


def parse_vpa(raw: Mapping[str, Any]) -> VPA:
    meta = _map(raw.get("metadata"), "metadata", "<unnamed>")
    namespace, name = meta.get("namespace") or "default", meta.get("name")
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise VPAParseError("<unnamed>", "metadata.name is missing")
    key = f"{namespace}/{name}"
    spec = _map(raw.get("spec"), "spec", key)
    ref = _map(spec.get("targetRef"), "spec.targetRef", key)
    kind, target = ref.get("kind"), ref.get("name")
    if not isinstance(kind, str) or not isinstance(target, str) or not kind or not target:
        raise VPAParseError(key, "spec.targetRef needs a kind and a name")
    mode_text = _map(spec.get("updatePolicy"), "spec.updatePolicy", key).get("updateMode") or "Recreate"
    try:
        mode = UpdateMode(mode_text)
    except ValueError as err:
        raise VPAParseError(
            key, f"spec.updatePolicy.updateMode {mode_text!r} is not one of VPA's modes"
        ) from err
    annotations = _map(meta.get("annotations"), "metadata.annotations", key)
    recommenders = tuple(
        str(r["name"])
        for r in spec.get("recommenders") or ()
        if isinstance(r, Mapping) and isinstance(r.get("name"), str)
    )
    policies = []
    resource_policy = _map(spec.get("resourcePolicy"), "spec.resourcePolicy", key)
    for i, p in enumerate(resource_policy.get("containerPolicies") or ()):
        where = f"spec.resourcePolicy.containerPolicies[{i}]"
        p, container = _container_entry(p, where, key)
        controlled, values = _controls(p, where, key)
        policies.append(
            ContainerPolicy(
                container,
                off=p.get("mode") == "Off",
                min_allowed=_resources(p.get("minAllowed"), f"{where}.minAllowed", key),
                max_allowed=_resources(p.get("maxAllowed"), f"{where}.maxAllowed", key),
                controlled=controlled,
                values=values,
            )
        )
    recs = []
    status = _map(raw.get("status"), "status", key)
    recommendation = _map(status.get("recommendation"), "status.recommendation", key)
    for i, r in enumerate(recommendation.get("containerRecommendations") or ()):
        where = f"status.recommendation.containerRecommendations[{i}]"
        r, container = _container_entry(r, where, key)
        recs.append(
            Recommendation(
                container,
                _resources(r.get("target"), f"{where}.target", key),
                _resources(r.get("lowerBound"), f"{where}.lowerBound", key),
                _resources(r.get("upperBound"), f"{where}.upperBound", key),
            )
        )
    return VPA(
        namespace,
        name,
        kind,
        target,
        mode,
        opted_in=annotations.get(ACTUATOR_ANNOTATION) == "node",
        recommenders=recommenders,
        policies=tuple(policies),
        recommendations=tuple(recs),
        pod_policy=_pod_policy(resource_policy, annotations, key),
        pod_recommendation=_pod_recommendation(recommendation, annotations, key),
    )
