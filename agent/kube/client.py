"""One configured Kubernetes API client: in-cluster, or a kubeconfig, never the library's global one.

Why a fresh Configuration: the library's default configuration is process-global; the daemon, the
one-shot commands and tests each get their own.
"""

from __future__ import annotations

from typing import Any

from agent.infra.errors import AgentError


class KubeConfigError(AgentError):
    """No usable credentials: not in a cluster and no kubeconfig."""


def api_client(kubeconfig: str | None, connections: int | None = None) -> Any:
    """An ApiClient from `kubeconfig`, else the in-cluster ServiceAccount, else ~/.kube/config;
    `connections`: the pool's size, when more requests than the default run at once (one per watch)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                config.load_kube_config(client_configuration=configuration)
    except (ConfigException, OSError, TypeError, ValueError) as err:
        raise KubeConfigError(f"cannot configure the Kubernetes client: {err}") from err
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration=configuration)
