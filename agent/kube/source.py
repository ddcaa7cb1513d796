"""List the pods bound to one node from the API server (and the LimitRanges bounding their annotations)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agent.core.model import Problem
from agent.infra.apiserver import APIServer, path
from agent.pods.load import Loaded, from_objects
from agent.pods.sources import DEFAULT_SOURCES, Source
from agent.pods.sources.limitrange import LimitRanges


def _list_limit_ranges(api: APIServer, limit_ranges: LimitRanges) -> list[str]:
    """Read every LimitRange into `limit_ranges` (a failure: they are unavailable, annotation-driven changes
    refused); the problem lines of those left out."""
    from kubernetes.client.exceptions import ApiException

    try:
        items = api.list(path("v1", "limitranges")).get("items") or []
    except ApiException as err:
        limit_ranges.unavailable(f"listing limitranges failed: {err.status} {err.reason}")
        return []
    except (OSError, ValueError) as err:
        limit_ranges.unavailable(f"listing limitranges failed: {err}")
        return []
    return limit_ranges.replace_objects(i for i in items if isinstance(i, dict))[1]


def list_node_pods(
    kubeconfig: str | None, node: str, sources: Sequence[Source] = DEFAULT_SOURCES, limit_ranges: LimitRanges | None = None
) -> Loaded:
    from kubernetes.client.exceptions import ApiException

    from agent.kube.client import KubeConfigError, api_client

    try:
        api = APIServer(api_client(kubeconfig))
    except KubeConfigError as err:
        return Loaded((), (Problem(None, str(err)),))
    try:
        pods = api.list(path("v1", "pods"), {"fieldSelector": f"spec.nodeName={node}"})
    except ApiException as err:
        return Loaded((), (Problem(None, f"listing pods of node {node} failed: {err.status} {err.reason}"),))
    except OSError as err:
        return Loaded((), (Problem(None, f"the API server is not reachable: {err}"),))
    warnings = _list_limit_ranges(api, limit_ranges) if limit_ranges is not None else []
    loaded = from_objects([p for p in pods.get("items") or [] if isinstance(p, dict)], sources)
    return replace(loaded, warnings=(*loaded.warnings, *warnings))
