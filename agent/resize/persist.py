"""The engine's records on disk: loaded (or rebuilt from the kernel) at start, saved before any step
that depends on them, completions flushed later.

Why apart from the pass: the order is the engine's safety rule — an admitted allocation is on disk
before the first cgroup write for it, and a pass after a failed save saves again before any step — and
it is kept in one place. The store (`agent.resize.store`) decides how records reach the disk; this
decides when, and what a failure means for the pass: a pod whose record could not be written waits
(reported), a failure of the directory itself raises, a failed flush is only a warning (the durable
records still restart every pod correctly).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.config.settings import Settings
from agent.core.model import PodUID, PodView, Problem
from agent.pipeline import Environment
from agent.resize.book import PodBook
from agent.resize.checkpoint import CheckpointError
from agent.resize.readback import rebuild_records
from agent.resize.report import PassReport
from agent.resize.state import PodRecord
from agent.resize.store import PodStore, RecordsNotSaved


class Persister:
    def __init__(self, store: PodStore) -> None:
        self.store = store
        self._saved_records: object = None  # the records mapping last saved (immutable: identity = unchanged)
        self.unsaved = False  # a save failed: the next pass saves before any step
        self.resumed = 0  # pods whose records the last load found on disk (not rebuilt from the kernel)

    def load(
        self, settings: Settings, env: Environment, pods: Sequence[PodView], *, persist: bool
    ) -> tuple[list[PodRecord], list[Problem]]:
        """The checkpointed records, the missing or damaged ones rebuilt from the kernel; and the
        warnings for the log. With `persist` off nothing is written (no migration, no quarantine)."""
        problems: list[Problem] = []
        loaded = self.store.load(persist=persist)
        self.resumed = len(loaded.records) if loaded.found else 0
        if loaded.migrated is not None:
            problems.append(Problem(None, f"the resize checkpoint was migrated to {self.store.path} (one record per pod); the old file is {loaded.migrated}"))
        damaged = {d.uid for d in loaded.damaged}
        for d in loaded.damaged:
            where = f"; moved to {d.moved_to}" if d.moved_to else ""
            problems.append(Problem(None, f"{d.reason}{where}; that pod's allocated state is rebuilt from the kernel"))
        if not loaded.found:
            if not loaded.damaged:
                problems.append(
                    Problem(None, f"no resize state at {self.store.path}: allocated state rebuilt from the kernel")
                )
            return rebuild_records(settings, env, pods), problems
        rebuilt = rebuild_records(settings, env, [p for p in pods if p.uid in damaged])
        return [*loaded.records, *rebuilt], problems

    def save(self, book: PodBook, *, full: bool = False) -> None:
        """Write the records that changed (the state is immutable: an unchanged pass keeps the very
        same mapping, so nothing is looked at); the store writes only the changed pods' records. A pod
        event hands the store the pods it touched; a resync (`full`) has every record looked at."""
        records = book.state.records
        if records is self._saved_records:
            return
        self.unsaved = True  # until it is on disk: no step may run on a state that is not
        touched, book.touched = book.touched, set()
        try:
            if full:
                self.store.save(records.values())
            else:
                self.store.save_changed(records, touched)
        except RecordsNotSaved as err:
            book.touched.update(PodUID(u) for u in err.uids)  # the others are on disk
            raise
        except BaseException:
            book.touched |= touched
            raise
        self._saved_records = records
        self.unsaved = False

    def save_or_report(self, book: PodBook, report: PassReport, *, full: bool) -> frozenset[str]:
        """Save; the pods whose records could not be written are reported and returned (a failure of
        the directory itself raises: nothing may be actuated then)."""
        try:
            self.save(book, full=full)
        except RecordsNotSaved as err:
            report.errors.append(Problem(None, err.user_message()))
            return err.uids
        return frozenset()

    def flush(self) -> None:
        """Write the completed resizes' records the store holds back (see `agent.resize.store`)."""
        self.store.flush()

    def flush_or_report(self, report: PassReport) -> None:
        try:
            self.flush()
        except CheckpointError as err:  # the durable records still restart every pod correctly
            report.warnings.append(Problem(None, err.user_message()))
