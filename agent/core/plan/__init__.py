"""Ordering changes so that a child never exceeds its parent (pure).

Per resource — memory first, then CPU, as the kubelet actuates — the steps run in four phases:
  A. pod and tier cgroups whose limit grows, parents first;
  B. containers whose limit shrinks;
  C. pod and tier cgroups whose limit shrinks, children first;
  D. containers whose limit grows.
Whatever the starting and final states, if the final state has every child within its parent, every
intermediate state does too: a parent only shrinks once its children are at or below their final
values, and a child only grows once its parent is at its final value.

The memory limits qos-reserved puts on the Burstable and BestEffort tiers are not containment (a pod's
limit may be above its tier's, as the kubelet sets them); they keep the lower tiers out of memory the
higher tiers requested. So they move around every pod and container memory step: a tier limit that
shrinks (a higher-tier request grows, a pod arrives) is written before anything else, lowest tier first;
one that grows (a request shrinks, a pod left) after everything else. While pod values change, every
tier is thus at or below the limit that protects both the old and the new requests. A shrink the
kernel refuses (usage above it) is set at the usage instead, as the kubelet does (see `execute`). `check_invariants` replays a plan
and refuses it if any step would break the rule. Within one v1 cgroup, CFS period and quota are
written in the order that keeps the quota/period ratio between its old and new values (the kernel
compares ratios), and memory+swap is raised before the memory limit when it would be exceeded.
"""

from __future__ import annotations

from agent.core.plan.build import build_plan
from agent.core.plan.groups import resource_of, usage_paths, usage_paths_of
from agent.core.plan.invariants import check_invariants
from agent.core.plan.tiers import MEMORY_LIMIT_FILES, reserve_tiers, without_tier_memory_growth
from agent.core.plan.types import (
    INF,
    RESOURCE_ORDER,
    Blocked,
    CgroupStep,
    ContainerStep,
    Plan,
    Resource,
    RestartStep,
    Step,
)

__all__ = [
    "INF",
    "MEMORY_LIMIT_FILES",
    "RESOURCE_ORDER",
    "Blocked",
    "CgroupStep",
    "ContainerStep",
    "Plan",
    "Resource",
    "RestartStep",
    "Step",
    "build_plan",
    "check_invariants",
    "reserve_tiers",
    "resource_of",
    "usage_paths",
    "usage_paths_of",
    "without_tier_memory_growth",
]
