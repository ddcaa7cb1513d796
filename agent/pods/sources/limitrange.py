"""The namespaces' LimitRanges as last listed: the bound of annotation-driven changes.

The rules (what a LimitRange says, and the LimitRanger admission plugin's validation of a pod against
it) are `agent.pods.sources.limitrange_rules`, loaded once there is a LimitRange to read or a pod to check:
a command over manifests without LimitRanges and annotations never needs them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.core.model import PodView

if TYPE_CHECKING:
    from agent.pods.sources.limitrange_rules import LimitRange


# ---- the namespaces' LimitRanges as last seen ------------------------------------------------------


class _Seen:
    """The LimitRanges as last listed, by namespace, or why they could not be (immutable: replaced whole)."""

    __slots__ = ("by_namespace", "failing", "known", "unavailable")

    def __init__(self, by_namespace: Mapping[str, tuple[LimitRange, ...]], unavailable: str | None,
                 known: frozenset[str] | None = None, failing: Mapping[str, str] | None = None) -> None:
        self.by_namespace = by_namespace
        self.unavailable = unavailable  # why they cannot be read; None when listed
        self.known = known  # the namespaces listed; None: every namespace (a cluster-wide list, a directory)
        self.failing = failing or {}  # namespaces not known, and why their list fails


class LimitRanges:
    """The LimitRanges of the namespaces where annotations are honoured, as last listed: the bound the
    annotation sources attach to their proposals (an `agent.pods.sources.base.Bound`).

    Unknown until the first list (`unknown()`, the daemon), then replaced whole by each (re)list or watch
    event. While unknown or unreadable, an annotation-driven change is refused (fail closed): it cannot be
    checked. `settled` is set once something is known, so the daemon can hold its first pass until then.
    Read by the workers, written by one watch thread: the state is one immutable value, swapped whole.
    """

    def __init__(self, by_namespace: Mapping[str, Sequence[LimitRange]] | None = None, namespaces: frozenset[str] | None = None) -> None:
        self.namespaces = namespaces
        self.settled = threading.Event()
        self._seen: _Seen | None = None
        if by_namespace is not None:
            self.replace(by_namespace)

    @classmethod
    def unknown(cls, namespaces: frozenset[str] | None = None) -> LimitRanges:
        return cls(None, namespaces)

    def replace(self, by_namespace: Mapping[str, Sequence[LimitRange]],
                known: frozenset[str] | None = None, failing: Mapping[str, str] | None = None) -> frozenset[str] | None:
        """Now these (every namespace not named has none) in the `known` namespaces (None: in every one;
        a namespace not known is not listed yet: its annotation-driven changes wait). Returns the namespaces
        whose LimitRanges (or whether they are known) changed, or None when every namespace may have."""
        new = {ns: tuple(lrs) for ns, lrs in by_namespace.items() if lrs}
        before = self._seen
        self._seen = _Seen(new, None, known, failing)
        self.settled.set()
        if before is None or before.unavailable is not None or (before.known is None) != (known is None):
            return None
        old = before.by_namespace
        changed = {ns for ns in old.keys() | new.keys() if old.get(ns) != new.get(ns)}
        if known is not None and before.known is not None:
            changed |= known ^ before.known
        changed |= {ns for ns in before.failing.keys() | (failing or {}).keys()
                    if before.failing.get(ns) != (failing or {}).get(ns)}
        return frozenset(changed)

    def replace_objects(self, objects: Iterable[Mapping[str, Any]], known: frozenset[str] | None = None,
                        failing: Mapping[str, str] | None = None) -> tuple[frozenset[str] | None, list[str]]:
        """`replace` from raw LimitRange objects; also the problem lines of those left out."""
        objects = list(objects)
        if not objects:  # none in the input: nothing to read
            return self.replace({}, known, failing), []
        from agent.pods.sources.limitrange_rules import parse_all

        by_ns, problems = parse_all(objects, self.namespaces)
        return self.replace(by_ns, known, failing), problems

    def unavailable(self, reason: str) -> bool:
        """They cannot be read now (the last known ones are kept while a watch recovers; this is for when
        none was ever listed). Returns whether this changed anything."""
        before = self._seen
        if before is not None and before.unavailable is None:
            return False
        self._seen = _Seen({}, reason)
        self.settled.set()
        return before is None or before.unavailable != reason

    def of(self, namespace: str) -> tuple[LimitRange, ...]:
        seen = self._seen
        return tuple(seen.by_namespace.get(namespace, ())) if seen is not None else ()

    def check(self, pod: PodView) -> None:
        """Raise LimitRangeViolation (or LimitRangesUnavailable) for a pod the API server would refuse."""
        from agent.pods.sources.limitrange_rules import LimitRangesUnavailable, LimitRangeViolation, check_pod

        seen = self._seen
        unknown = seen is not None and seen.known is not None and pod.namespace not in seen.known
        if seen is None or seen.unavailable is not None or unknown:
            failing = seen.failing.get(pod.namespace) if seen is not None else None
            why = (f"they cannot be read: {seen.unavailable}" if seen is not None and seen.unavailable is not None
                   else f"they cannot be read: {failing}" if failing else "they are not listed yet")
            raise LimitRangesUnavailable(
                f"refused: the annotations' change cannot be checked against namespace {pod.namespace}'s "
                f"LimitRanges ({why})",
                pod=pod.key,
            )
        violations = check_pod(pod, seen.by_namespace.get(pod.namespace, ()))
        if violations:
            raise LimitRangeViolation(violations)
