"""What a rollout pass reads from the API: the workload's pods (one LIST a pass), its ControllerRevisions
(cached: a revision never changes), a DaemonSet's update revision per generation, and from them how one
pod changes (in place or recreated).

Why cached here: the watches only say that a workload moved; its revisions are read when a pod of this
node is behind, and a revision read once serves every later pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.infra.apiserver import APIServer, path
from agent.kube.errors import APINotFound, wrap
from agent.pods.quantity import parse_any
from agent.rollout.config import RolloutSettings
from agent.rollout.eligibility import Change, Kind, classify, template_of
from agent.rollout.workload import (
    REVISION_LABEL,
    Policy,
    Workload,
    daemonset_update_revision,
    owned_by,
    revision_hash,
)


class Revisions:
    def __init__(self, api: APIServer, settings: RolloutSettings) -> None:
        self.api = api
        self.settings = settings
        self.revisions: dict[tuple[str, str], Mapping[str, Any]] = {}  # (ns, name) -> ControllerRevision (immutable)
        self.ds_update: dict[tuple[str, int], str] = {}  # (DaemonSet uid, generation) -> update revision name

    def pods(self, w: Workload) -> list[Mapping[str, Any]]:
        """The workload's pods, on every node."""
        listed = self.api.list(path("v1", "pods", w.namespace), {"labelSelector": w.label_selector}, timeout=(10, 30))
        items = listed.get("items") or []
        return [p for p in items if owned_by(p, w.uid)]

    def _revision(self, ns: str, name: str) -> Mapping[str, Any] | None:
        cached = self.revisions.get((ns, name))
        if cached is None:
            try:
                got = self.api.get(path("apps/v1", "controllerrevisions", ns, name), timeout=(10, 30))
            except Exception as err:
                if isinstance(wrap("read revision", err), APINotFound):
                    return None
                raise
            cached = got
            self.revisions[(ns, name)] = cached
        return cached

    def update_revision(self, w: Workload) -> tuple[str, Mapping[str, Any]] | None:
        """(the hash pods at the update revision carry, that revision)."""
        if w.update_revision:  # StatefulSet
            rev = self._revision(w.namespace, w.update_revision)
            return (w.update_revision, rev) if rev is not None else None
        name = self.ds_update.get((w.uid, w.generation))
        if name is None and w.observed_generation < w.generation:
            return None  # the controller has not written this generation's revision yet: next pass
        if name is None:
            listed = self.api.list(path("apps/v1", "controllerrevisions", w.namespace), {"labelSelector": w.label_selector},
                                   timeout=(10, 30))
            items = listed.get("items") or []
            for item in items:
                self.revisions[(w.namespace, str(item["metadata"]["name"]))] = item
            latest = daemonset_update_revision(items, w.uid)
            if latest is None:
                return None
            name = str(latest["metadata"]["name"])
            self.ds_update[(w.uid, w.generation)] = name
        rev = self._revision(w.namespace, name)
        return (revision_hash(rev), rev) if rev is not None else None

    def change(self, w: Workload, pod: Mapping[str, Any], update_rev: Mapping[str, Any]) -> Change | None:
        """How `pod` goes to `update_rev`; None when neither of its revisions is readable."""
        if w.policy is Policy.RECREATE:
            return Change(Kind.RECREATE, f"{w.kind.value} policy Recreate")
        current_hash = str(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL) or "")
        current = self._current_revision(w, current_hash)
        new, old = template_of(update_rev), template_of(current) if current is not None else None
        if new is None or old is None:
            return Change(Kind.RECREATE, "the pod's revision is gone: recreated") if new is not None else None
        return classify(old, new, parse_any, self.settings.options())

    def _current_revision(self, w: Workload, current_hash: str) -> Mapping[str, Any] | None:
        if w.update_revision is not None:  # StatefulSet: the label is the revision's name
            return self._revision(w.namespace, current_hash)
        for (ns, _), rev in self.revisions.items():  # DaemonSet: listed with the update revision
            if ns == w.namespace and owned_by(rev, w.uid) and revision_hash(rev) == current_hash:
                return rev
        return None
