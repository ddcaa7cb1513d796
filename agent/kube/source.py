"""List the pods bound to one node from the API server."""

from __future__ import annotations

from collections.abc import Sequence

from agent.model import Problem
from agent.pods.load import Loaded, from_objects
from agent.sources import DEFAULT_SOURCES, Source


def list_node_pods(kubeconfig: str | None, node: str, sources: Sequence[Source] = DEFAULT_SOURCES) -> Loaded:
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
    return from_objects(list(pods.items), sources)
