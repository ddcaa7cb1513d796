"""The one pipeline every command runs: pods -> compute -> desired files -> read -> diff -> plan.

`diff` stops after the diff (`compare`), the other dry-run commands after `plan`; `apply` and the daemon
hand the plan to the executor. This is
the imperative shell around the pure core: it is the only place that decides where pods and cgroup
files come from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.config.settings import Settings
from agent.core.compute import NodeComputation, compute_node
from agent.core.diff import DesiredFile, NodeDiff, Observation, desired_files, diff, paths_to_read
from agent.core.model import PodView, Problem
from agent.infra.errors import PermanentError
from agent.pods.load import Loaded, SourceError, load_path
from agent.pods.sources import Source, default_sources
from agent.pods.sources.limitrange import LimitRanges
from cgroupfs.files import CgroupFiles
from cgroupfs.hugepages import node_hugepage_sizes
from cgroupfs.layout import Hierarchy, RenderOptions, cgroup_directory
from cgroupfs.mounts import detect_hierarchy
from cgroupfs.types import CgroupName, Controller

if TYPE_CHECKING:  # the planner is loaded by what plans: `diff` stops before it
    from agent.core.plan import Plan

class PipelineError(PermanentError):
    """Something that stops the whole command (no pods source, no cgroup hierarchy)."""


@dataclass(frozen=True, slots=True)
class Environment:
    """The node the pipeline runs on: settings, hierarchies, huge page sizes and the cgroup files."""

    settings: Settings
    hierarchy: Hierarchy
    hugepage_sizes: tuple[int, ...]
    files: CgroupFiles

    @property
    def render_options(self) -> RenderOptions:
        return RenderOptions(self.settings.cgroup_driver, self.settings.cpu_weight_formula.value)

    @property
    def container_render_options(self) -> RenderOptions:
        return RenderOptions(self.settings.cgroup_driver, self.settings.container_cpu_weight_formula.value)

    def cgroup_dir(self, name: CgroupName) -> str | None:
        """Where the cgroup `name` is, in the first of the memory and CPU hierarchies this node has."""
        for controller in (Controller.MEMORY, Controller.CPU):
            directory = cgroup_directory(name, controller, self.hierarchy, self.render_options.driver)
            if directory is not None:
                return directory
        return None


def owned_roots(settings: Settings, hierarchy: Hierarchy) -> tuple[str, ...]:
    """The agent owns the kubepods subtree below the cgroup root, in every hierarchy it uses."""
    node = settings.cgroup_root_name.child("kubepods")
    roots = []
    for controller in Controller:
        d = cgroup_directory(node, controller, hierarchy, settings.cgroup_driver)
        if d is not None:
            roots.append(d)
    return tuple(dict.fromkeys(roots))


def environment(settings: Settings) -> Environment:
    try:
        hierarchy = detect_hierarchy(settings.cgroupfs, version=settings.cgroup_version)
    except (OSError, ValueError) as err:
        raise PipelineError(f"cannot find the cgroup hierarchies under {settings.cgroupfs}: {err}") from err
    sizes = settings.hugepage_sizes
    if sizes is None:
        sizes = node_hugepage_sizes()
    return Environment(
        settings, hierarchy, sizes, CgroupFiles(settings.cgroupfs, owned_roots(settings, hierarchy))
    )


def load_pods(settings: Settings, extra: Sequence[Source] = ()) -> Loaded:
    """The node's pods; `extra`: sources of desired state beyond the annotations (the CLI's VPA source).
    The annotations are bounded by the LimitRanges the input carries (files), or the API's (no files)."""
    limit_ranges = LimitRanges.unknown(settings.annotation_namespaces) if settings.annotation_namespaces != frozenset() else None
    sources = (*default_sources(settings.annotation_namespaces, limit_ranges), *extra)
    if settings.pods is not None:
        try:
            return load_path(settings.pods, sources=sources, limit_ranges=limit_ranges)
        except SourceError as err:
            raise PipelineError(str(err)) from err
    node = settings.node_name or os.environ.get("NODE_NAME")
    if not node:
        raise PipelineError(
            "no --pods given and no --node (or NODE_NAME) to list the node's pods from the API"
        )
    from agent.kube.source import list_node_pods

    return list_node_pods(settings.kubeconfig, node, sources, limit_ranges)


def compute(
    settings: Settings,
    env: Environment,
    pods: tuple[PodView, ...],
    errors: tuple[Problem, ...],
    warnings: tuple[str, ...] = (),
) -> NodeComputation:
    comp = compute_node(pods, settings.compute_config(env.hugepage_sizes))
    if errors or warnings:
        seen = (*(Problem(None, w) for w in warnings), *comp.warnings)
        comp = NodeComputation(comp.pods, comp.tiers, seen, (*errors, *comp.errors))
    return comp


def observe(env: Environment, files: tuple[DesiredFile, ...]) -> Observation:
    texts, dirs = env.files.read_many(paths_to_read(files))
    return Observation(files=texts, dirs=dirs)


@dataclass(frozen=True, slots=True)
class Result:
    """A pipeline run to its diff, with the usage files a plan reads besides."""

    env: Environment
    diff: NodeDiff
    extra: dict[str, str | None]

    def plan(self, include_containers: bool = True) -> Plan:
        from agent.core.plan import build_plan

        return build_plan(self.diff, self.extra, include_containers=include_containers)


PodEnricher = Callable[[tuple[PodView, ...]], tuple[PodView, ...]]


def compare(
    settings: Settings,
    include_containers: bool = True,
    env: Environment | None = None,
    enrich: PodEnricher | None = None,
    sources: Sequence[Source] = (),
) -> tuple[Environment, NodeDiff]:
    """The node's diff, all that `diff` shows; `enrich` may complete the pods before computing (e.g. container
    IDs from the runtime)."""
    env = env or environment(settings)
    loaded = load_pods(settings, sources)
    pods = enrich(loaded.pods) if enrich is not None else loaded.pods
    comp = compute(settings, env, pods, loaded.errors, loaded.warnings)
    wanted = desired_files(
        comp, env.hierarchy, env.render_options, env.container_render_options, include_containers
    )
    return env, diff(comp, wanted, observe(env, wanted))


def run(
    settings: Settings,
    include_containers: bool = True,
    env: Environment | None = None,
    enrich: PodEnricher | None = None,
    sources: Sequence[Source] = (),
) -> Result:
    """`compare`, and the usage files a plan reads besides."""
    env, node_diff = compare(settings, include_containers, env, enrich, sources)
    from agent.core.plan import usage_paths

    extra, _ = env.files.read_many(usage_paths(node_diff))
    return Result(env, node_diff, extra)
