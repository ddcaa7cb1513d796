"""`kube-cgroup-agent rollout status KIND/NAME`: where each pod of an opted-in StatefulSet or DaemonSet
stands in its graceful in-place rollout, read from the API (read-only) and decided by the same rules the
agents follow (agent.rollout.report). Exit 0 when the rollout is complete, 1 while it is not, 2 on error."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from agent.infra.errors import PermanentError
from agent.rollout.config import RolloutSettings
from agent.rollout.order import WorkloadKind
from agent.rollout.report import status, table
from agent.rollout.workload import (
    RolloutConfigError,
    daemonset_update_revision,
    owned_by,
    parse_workload,
    revision_hash,
)

KINDS = {"statefulset": "StatefulSet", "sts": "StatefulSet", "daemonset": "DaemonSet", "ds": "DaemonSet"}


class RolloutStatusError(PermanentError):
    pass


def parse_target(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition("/")
    if not sep or not name or kind.lower() not in KINDS:
        raise RolloutStatusError(f"{text!r}: give KIND/NAME with KIND statefulset or daemonset (e.g. statefulset/web)")
    return KINDS[kind.lower()], name


def run(target: str, namespace: str, kubeconfig: str | None, settings: RolloutSettings, output: str) -> int:
    kind, name = parse_target(target)
    from agent.infra.apiserver import APIServer, path
    from agent.kube.client import api_client
    from agent.kube.errors import APINotFound, wrap

    api = APIServer(api_client(kubeconfig))
    try:
        raw = api.get(path("apps/v1", WorkloadKind(kind).plural, namespace, name), timeout=(10, 30))
        try:
            w = parse_workload(kind, raw)
        except RolloutConfigError as err:
            raise RolloutStatusError(str(err)) from None
        if w is None:
            raise RolloutStatusError(f"{kind}/{namespace}/{name} does not opt in (annotation kube-cgroup-agent.io/pod-update-policy)")
        if w.update_revision:
            update = w.update_revision
        else:
            revs = api.list(path("apps/v1", "controllerrevisions", namespace), {"labelSelector": w.label_selector}, timeout=(10, 30))
            latest = daemonset_update_revision(revs.get("items") or [], w.uid)
            if latest is None:
                raise RolloutStatusError(f"{kind}/{namespace}/{name} has no ControllerRevision yet")
            update = revision_hash(latest)
        pods = api.list(path("v1", "pods", namespace), {"labelSelector": w.label_selector}, timeout=(10, 30))
    except RolloutStatusError:
        raise
    except Exception as err:
        api_err = wrap(f"read {kind}/{namespace}/{name}", err)
        if isinstance(api_err, APINotFound):
            raise RolloutStatusError(f"{kind}/{namespace}/{name} not found") from None
        raise RolloutStatusError(str(api_err)) from None
    mine: list[Mapping[str, Any]] = [p for p in pods.get("items") or [] if owned_by(p, w.uid)]
    st = status(w, mine, update, time.time(), settings.ready_timeout_s)
    print(json.dumps(st.to_json(), indent=2) if output == "json" else table(st))
    return 0 if st.complete else 1
