"""List the pods bound to one node from the API server (and the LimitRanges bounding their annotations)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agent.core.model import Problem
from agent.pods.load import Loaded, from_objects
from agent.pods.sources import DEFAULT_SOURCES, Source
from agent.pods.sources.limitrange import LimitRanges


def _list_limit_ranges(api: Any, limit_ranges: LimitRanges) -> list[str]:
    """Read every LimitRange into `limit_ranges` (a failure: they are unavailable, annotation-driven changes
    refused); the problem lines of those left out."""
    from kubernetes.client.exceptions import ApiException

    try:
        resp = api.list_limit_range_for_all_namespaces(_preload_content=False)
        items = json.loads(resp.data).get("items") or []
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
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except ConfigException:
                config.load_kube_config()
    except (ConfigException, OSError) as err:
        return Loaded((), (Problem(None, f"cannot configure the Kubernetes client: {err}"),))
    api = client.CoreV1Api()
    try:
        pods = api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    except ApiException as err:
        return Loaded((), (Problem(None, f"listing pods of node {node} failed: {err.status} {err.reason}"),))
    except OSError as err:
        return Loaded((), (Problem(None, f"the API server is not reachable: {err}"),))
    warnings = _list_limit_ranges(api, limit_ranges) if limit_ranges is not None else []
    loaded = from_objects(list(pods.items), sources)
    return replace(loaded, warnings=(*loaded.warnings, *warnings))
