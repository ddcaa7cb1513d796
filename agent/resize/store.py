"""The allocated state on disk, one record per pod: `<state_dir>/pods/<uid>.json`.

Why one file per pod: a resize changes one pod's record, so a save writes and fsyncs only that record
(temp file + fsync + rename): O(changed pods), not O(node) as the single checkpoint file was. The
directory is fsynced once per batch when a record file is created or removed; a record that replaces
the pod's earlier one is written as the kubelet writes its own checkpoints (data fsynced, then renamed,
no directory fsync): an agent crash finds the new record whole, and a power loss before the file
system's next commit finds the earlier, durable one — the pod's previous allocation, from which the
resize is admitted again (its spec is the API's, not this file's). Why not a journal: the records are small and few change per
pass; a journal would need compaction and a replay on start for no fewer fsyncs (measured in
BENCHMARKS.md figure 2). A crash leaves each record either old or new; a record that fails any check
(bad JSON, checksum, kind, version, shape, a file name that is not its UID) is moved aside as
`<uid>.json.corrupt` and only that pod's allocation is rebuilt from the kernel, with a warning.

Why a completed resize's record is written later: a resize writes the pod's record twice, once when
admitted (its new allocation, with its place in the queue: written and fsynced before the first cgroup
write) and once when actuated (the same allocation, out of the queue). The second
differs from the first only in that place (`completes`), so losing it in a crash shows the first record
(after a power loss, possibly an earlier one: see above): the pod restarts InProgress at the same allocation and is driven again, which reads the
kernel back and finds it done (or writes what is missing). So the second is held (`deferred`) and
written by `flush` — the engine's node-wide pass and the daemon's shutdown — off the resize's path; a
newer record of the pod replaces it, a pod gone drops it.

The single-file checkpoint of earlier releases (`resize-checkpoint.json`) is migrated on first start:
its records are written here, then the old file is renamed `.migrated` (kept for one release).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent.core.model import ModelError, PodUID, validate_pod_uid
from agent.infra.atomicfile import fsync_dir, write_atomic
from agent.resize.allocation import allocation_from_json, allocation_to_json
from agent.resize.checkpoint import CHECKPOINT_NAME, CheckpointCorrupt, CheckpointError, CheckpointStore
from agent.resize.state import PodRecord

DIR_NAME: Final = "pods"
KIND: Final = "KubeCgroupAgentPodRecord"
VERSION: Final = 1
SUFFIX: Final = ".json"


@dataclass(frozen=True, slots=True)
class Damaged:
    uid: str
    reason: str
    moved_to: Path | None


@dataclass(slots=True)
class Loaded:
    records: list[PodRecord] = field(default_factory=list)
    damaged: list[Damaged] = field(default_factory=list)
    found: bool = False  # any state at all (records, damaged ones, or a migrated checkpoint)
    migrated: Path | None = None  # the old single-file checkpoint, when it was migrated


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _beside_queue(r: PodRecord) -> tuple[object, ...]:
    """What of a record reaches the disk, but its place in the queue."""
    return (r.uid, r.pod, r.allocated, dict(r.restarted))


def persisted(r: PodRecord) -> tuple[object, ...]:
    """What of a record reaches the disk: two records with equal `persisted` encode to the same bytes."""
    return (*_beside_queue(r), r.arrival)


def completes(old: PodRecord, new: PodRecord) -> bool:
    """`new` only takes a durable `old` out of the queue: the same pod, allocation and restarts. Losing
    `new` in a crash restores `old`, i.e. the same allocation InProgress, driven again (idempotent)."""
    return old.arrival is not None and new.arrival is None and _beside_queue(old) == _beside_queue(new)


def encode_record(r: PodRecord) -> bytes:
    data = {
        "uid": r.uid,
        "pod": r.pod,
        "allocated": allocation_to_json(r.allocated),
        "restarted": dict(r.restarted),
        "arrival": r.arrival,
    }
    checksum = "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()
    return _canonical({"kind": KIND, "version": VERSION, "checksum": checksum, "data": data}) + b"\n"


def decode_record(uid: str, raw: bytes) -> PodRecord:
    """The record, or ValueError naming what is wrong with it."""
    doc = json.loads(raw)  # ValueError on bad JSON
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ValueError(f"not a {KIND}")
    if doc.get("version") != VERSION:
        raise ValueError(f"version {doc.get('version')!r} is not {VERSION}")
    data = doc.get("data")
    if doc.get("checksum") != "sha256:" + hashlib.sha256(_canonical(data)).hexdigest():
        raise ValueError("checksum mismatch (torn or edited record)")
    if not isinstance(data, dict) or data.get("uid") != uid or not isinstance(data.get("pod"), str):
        raise ValueError("the record names another pod than its file")
    restarted = data.get("restarted", {})
    if not isinstance(restarted, dict) or not all(isinstance(v, str) for v in restarted.values()):
        raise ValueError("restarted must map container names to IDs")
    arrival = data.get("arrival")
    if arrival is not None and (not isinstance(arrival, int) or isinstance(arrival, bool)):
        raise ValueError("arrival must be an integer or null")
    try:
        alloc = allocation_from_json(data.get("allocated"))
        return PodRecord(validate_pod_uid(uid), data["pod"], alloc, alloc, arrival=arrival, restarted=restarted)
    except ModelError as err:
        raise ValueError(str(err)) from err


class RecordsNotSaved(CheckpointError):
    """Some pods' records could not be written (the others were): those pods wait, the rest go on."""

    def __init__(self, path: Path, reason: str, uids: frozenset[str]) -> None:
        super().__init__(path, reason)
        self.uids = uids


class PodStore:
    """Reads the records and writes back the ones that changed since the last save."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / DIR_NAME
        self.writes = 0  # records written (a figure for the benchmarks and tests)
        self._saved: dict[PodUID, PodRecord] = {}  # uid -> the record object last written (or deferred)
        self._deferred: dict[PodUID, PodRecord] = {}  # completing records not on disk yet (see the module doc)

    def exists(self) -> bool:
        return self.path.is_dir() or (self.state_dir / CHECKPOINT_NAME).exists()

    def load(self, persist: bool = True) -> Loaded:
        """Every readable record; damaged ones are moved aside (when `persist`) and listed. With no
        records yet and an old checkpoint present, that checkpoint is migrated (when `persist`)."""
        out = Loaded()
        old = self.state_dir / CHECKPOINT_NAME
        if not self.path.is_dir() and old.exists():
            return self._migrate(old, persist)
        try:
            names = sorted(f.name for f in self.path.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return out
        except OSError as err:
            raise CheckpointError(self.path, f"cannot read: {err.strerror}") from err
        out.found = True
        for name in names:
            if not name.endswith(SUFFIX) or name.startswith("."):
                continue
            uid = name[: -len(SUFFIX)]
            file = self.path / name
            try:
                rec = decode_record(uid, file.read_bytes())
            except (ValueError, OSError) as err:
                moved = self._quarantine(file) if persist else None
                out.damaged.append(Damaged(uid, f"pod record {file}: {err}", moved))
                continue
            out.records.append(rec)
            self._saved[rec.uid] = rec
        return out

    def _migrate(self, old: Path, persist: bool) -> Loaded:
        out = Loaded(found=True)
        try:
            records = CheckpointStore(self.state_dir).load() or []
        except CheckpointCorrupt as err:
            moved = CheckpointStore(self.state_dir).quarantine() if persist else None
            out.damaged.append(Damaged("", str(err), moved))
            out.found = False  # nothing usable: every pod is rebuilt from the kernel
            return out
        out.records = records
        if persist:
            self.save(records)
            target = old.with_name(old.name + ".migrated")
            old.replace(target)
            out.migrated = target
        return out

    def _quarantine(self, file: Path) -> Path | None:
        target = file.with_name(file.name + ".corrupt")
        try:
            file.replace(target)
        except FileNotFoundError:
            return None
        return target

    def save(self, records: Iterable[PodRecord]) -> None:
        """Write the records that changed (records are immutable: a new object is a change) and remove
        those of pods that are gone; one directory fsync for the batch. Looks at every record: the
        engine's resyncs and start; a pod event uses `save_changed`."""
        current = {r.uid: r for r in records}
        self._save(current, [*current, *(uid for uid in self._saved if uid not in current)])

    def save_changed(self, records: Mapping[PodUID, PodRecord], uids: Collection[PodUID]) -> None:
        """`save` for the pods in `uids` only (the caller knows which records may have changed since
        its last save): a pod event costs the records it changed, not the node's."""
        self._save(records, uids)

    def _save(self, current: Mapping[PodUID, PodRecord], uids: Iterable[PodUID]) -> None:
        changed: list[PodRecord] = []
        gone: list[PodUID] = []
        for uid in uids:
            r = current.get(uid)
            if r is None:
                if uid in self._saved:
                    gone.append(uid)
            elif self._saved.get(uid) is not r:
                changed.append(r)
        if not changed and not gone:
            return
        failed: dict[str, str] = {}  # uid -> why: one pod's record failing never holds back the others
        sync_dir = bool(gone)
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            for r in changed:
                old = self._saved.get(r.uid)
                if old is not None and persisted(old) == persisted(r):
                    self._saved[r.uid] = r  # an equal record: nothing to write
                    continue
                if old is not None and completes(old, r) and r.uid not in self._deferred:
                    self._saved[r.uid] = self._deferred[r.uid] = r  # `old` is durable: written by `flush`
                    continue
                self._deferred.pop(r.uid, None)
                try:
                    self._write(r)
                except OSError as err:
                    failed[r.uid] = err.strerror or str(err)
                    continue
                self._saved[r.uid] = r
                sync_dir = sync_dir or old is None  # a new file: its name made durable with the batch
            for uid in gone:
                (self.path / f"{uid}{SUFFIX}").unlink(missing_ok=True)
                del self._saved[uid]
                self._deferred.pop(uid, None)
            if sync_dir:
                fsync_dir(self.path)
        except OSError as err:
            raise CheckpointError(self.path, f"cannot write: {err.strerror or err}") from err
        if failed:
            reasons = "; ".join(f"{uid}: {why}" for uid, why in sorted(failed.items()))
            raise RecordsNotSaved(self.path, f"cannot write the records of {reasons}", frozenset(failed))

    def flush(self) -> None:
        """Write the deferred completing records (each replaces its pod's record: no directory fsync).
        A record that cannot be written stays deferred: its predecessor still restarts the pod correctly."""
        try:
            for uid, r in list(self._deferred.items()):
                self._write(r)
                del self._deferred[uid]
        except OSError as err:
            raise CheckpointError(self.path, f"cannot write: {err.strerror or err}") from err

    @property
    def deferred(self) -> int:
        """Completing records not on disk yet (a figure for the tests)."""
        return len(self._deferred)

    def _write(self, r: PodRecord) -> None:
        validate_pod_uid(r.uid)  # a UID becomes a file name: never a path
        write_atomic(self.path / f"{r.uid}{SUFFIX}", encode_record(r), sync_dir=False)  # one dir fsync per batch
        self.writes += 1


NODE_KIND: Final = "KubeCgroupAgentNodeRecord"


class NodeRecords:
    """Small node-wide records beside the pods' (`<state_dir>/<name>.json`, e.g. the drift records):
    written atomically with a checksum only when their content changed; a damaged one reads as empty
    with a reason (never a crash)."""

    def __init__(self, state_dir: Path, name: str) -> None:
        self.path = Path(state_dir) / f"{name}.json"
        self._last: bytes | None = None

    def load(self) -> tuple[dict[str, Any], str | None]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}, None
        except OSError as err:
            return {}, f"{self.path}: cannot read: {err.strerror}"
        try:
            doc = json.loads(raw)
            data = doc["data"] if isinstance(doc, dict) and doc.get("kind") == NODE_KIND else None
            if not isinstance(data, dict) or doc.get("version") != VERSION:
                raise ValueError(f"not a {NODE_KIND} version {VERSION}")
            if doc.get("checksum") != "sha256:" + hashlib.sha256(_canonical(data)).hexdigest():
                raise ValueError("checksum mismatch (torn or edited record)")
        except (ValueError, KeyError, TypeError) as err:
            return {}, f"{self.path}: {err}; starting empty"
        self._last = raw
        return data, None

    def save(self, data: dict[str, Any]) -> None:
        checksum = "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()
        raw = _canonical({"kind": NODE_KIND, "version": VERSION, "checksum": checksum, "data": data}) + b"\n"
        if raw == self._last:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self.path, raw)
        except OSError as err:
            raise CheckpointError(self.path, f"cannot write: {err.strerror or err}") from err
        self._last = raw

