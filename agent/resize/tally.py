"""The node at its allocated values, kept between passes, and a pass's read of the tree against it.

Why kept: a pass must cost O(the pods it acts on), so each pod's computation at its allocated values,
its share of the tier sums and of the allocated requests (what admission measures against) and its
rendered files stay here until its view or allocation changes (`stale`). A terminal pod, or one being
deleted, counts, as the kubelet counts it, while its pod cgroup is still there (`lingering`).
`snapshot` brings the totals up to date, reads the files that matter and diffs them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from agent.core.compute import NodeComputation, PodComputation, PodComputeError, compute_pod
from agent.core.compute.config import ComputeConfig
from agent.core.compute.tiers import RunningTierSums, compute_tiers_from_sums
from agent.core.diff import (
    DesiredFile,
    FilesCache,
    NodeDiff,
    Observation,
    desired_files,
    diff,
    not_yet_created,
    paths_to_read,
)
from agent.core.model import PodUID, PodView, Problem
from agent.core.plan import usage_paths
from agent.pipeline import Environment
from agent.resize.book import PodBook
from agent.resize.snapshot import Computed, Reader, Snapshot, compute_allocated

ToRead = Callable[[Sequence[DesiredFile], NodeComputation], list[DesiredFile]]
"""The desired files worth reading and diffing (not what the kubelet owns)."""


class NodeTally:
    def __init__(self, cfg: ComputeConfig) -> None:
        self.cfg = cfg
        self.comps: dict[PodUID, Computed] = {}
        self.sums = RunningTierSums()
        self.used = (0, 0)  # the allocated (CPU milli, memory) requests of the pods that count
        self.lingering: set[PodUID] = set()  # ending pods whose cgroup is still there: they count
        self.stale: set[PodUID] = set()  # pod or allocation changed since computed
        self.files: FilesCache = {}  # each pod's rendered files, while its computation is unchanged

    def forget(self, uid: PodUID) -> None:
        self.files.pop(uid, None)
        self.stale.add(uid)

    def find_lingering(self, book: PodBook, reader: Reader, env: Environment) -> None:
        """Which ending pods (terminal, or being deleted) still have their pod cgroup; those that changed
        are computed again."""
        lingering = {u for u in book.terminal if self._present(reader, env, book.pods[u])}
        self.stale |= lingering ^ self.lingering
        self.lingering = lingering

    def _present(self, reader: Reader, env: Environment, pod: PodView) -> bool:
        try:
            directory = env.cgroup_dir(compute_pod(pod, self.cfg).cgroup)
        except PodComputeError:
            return False
        return directory is not None and reader.exists(directory)

    def refresh(self, book: PodBook) -> None:
        """Recompute the pods whose view or allocation changed, and their shares of the running totals."""
        records = book.state.records
        for uid in self.stale:
            old = self.comps.pop(uid, None)
            if old is not None and old.active:
                self.used = (self.used[0] - old.requests[0], self.used[1] - old.requests[1])
            pod, rec = book.pods.get(uid), records.get(uid)
            if pod is None or rec is None:
                self.sums.drop(uid)
                continue
            computed = compute_allocated(pod, rec.allocated, self.cfg, lingering=uid in self.lingering)
            self.comps[uid] = computed
            self.sums.put(uid, None, computed.tier_share())
            if computed.active:
                self.used = (self.used[0] + computed.requests[0], self.used[1] + computed.requests[1])
        self.stale.clear()

    def snapshot(
        self,
        book: PodBook,
        reader: Reader,
        env: Environment,
        scope: Collection[PodUID] | None = None,
        *,
        to_read: ToRead | None = None,
        owned: Callable[[NodeDiff], NodeDiff] | None = None,
    ) -> Snapshot:
        """The tree read and diffed against the pods at their allocated values: every pod, or only
        those in `scope` (the tiers always, from the running totals). `owned`: the differences the
        agent owns."""
        self.refresh(book)
        uids: Collection[PodUID] = book.pods if scope is None else book.in_order(scope)
        comps: list[PodComputation] = []
        warnings: list[Problem] = []
        errors: list[Problem] = []
        for uid in uids:
            c = self.comps.get(uid)
            if c is None:
                continue
            if c.error is not None:
                errors.append(c.error)
            if c.comp is not None and c.actuate:
                comps.append(c.comp)
                warnings.extend(Problem(c.comp.pod.key, w) for w in c.comp.warnings)
        tiers = compute_tiers_from_sums(self.sums.total, self.cfg)
        comp = NodeComputation(tuple(comps), tiers, tuple(warnings), tuple(errors))
        wanted = desired_files(
            comp, env.hierarchy, env.render_options, env.container_render_options, True, cache=self.files
        )
        if to_read is not None:
            wanted = tuple(to_read(wanted, comp))
        texts, dirs = reader.read_many(paths_to_read(wanted))
        node, waiting = not_yet_created(diff(comp, wanted, Observation(texts, dirs)))
        if owned is not None:
            node = owned(node)
        # memory usage only where a memory value is about to change (the plan's guard): a converged
        # resync reads no usage file
        extra_paths = usage_paths(node)
        extra, _ = reader.read_many(extra_paths) if extra_paths else ({}, {})
        return Snapshot(node, extra, waiting)
