"""The allocated state on disk: one JSON file under the state dir, written atomically, checksummed.

Why this shape: the allocated values are the only resize state that cannot be re-derived (desired comes
from the pod source, actual from the kernel), so they are written *before* any step that depends on
them runs. A write is temp file + fsync + rename + fsync of the directory, so a crash leaves either the
old file or the new one; the SHA-256 over the canonical JSON of `data` catches a torn or edited file.
A file that fails any check raises CheckpointCorrupt (the engine then rebuilds from the kernel and keeps
the bad file next to it as `<name>.corrupt` for inspection).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from agent.core.model import ModelError, validate_pod_uid
from agent.infra.atomicfile import write_atomic
from agent.infra.errors import AgentError
from agent.resize.allocation import allocation_from_json, allocation_to_json
from agent.resize.state import PodRecord

CHECKPOINT_NAME: Final = "resize-checkpoint.json"
KIND: Final = "KubeCgroupAgentResizeCheckpoint"
VERSION: Final = 1


class CheckpointError(AgentError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"resize checkpoint {path}: {reason}")
        self.path = path
        self.reason = reason


class CheckpointCorrupt(CheckpointError):
    """The file exists but is not a valid checkpoint (bad JSON, checksum, version or shape)."""


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def checksum(data: Any) -> str:
    return "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()


def _record_json(r: PodRecord) -> dict[str, Any]:
    return {
        "pod": r.pod,
        "allocated": allocation_to_json(r.allocated),
        "restarted": dict(r.restarted),
        "arrival": r.arrival,  # set while a resize is queued or being actuated
    }


def encode(records: Iterable[PodRecord]) -> bytes:
    pods = {r.uid: _record_json(r) for r in sorted(records, key=lambda r: r.uid)}
    data = {"pods": pods}
    doc = {"kind": KIND, "version": VERSION, "checksum": checksum(data), "data": data}
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def decode(path: Path, raw: bytes) -> list[PodRecord]:
    try:
        doc = json.loads(raw)
    except ValueError as err:
        raise CheckpointCorrupt(path, f"not valid JSON ({err})") from err
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise CheckpointCorrupt(path, f"not a {KIND}")
    if doc.get("version") != VERSION:
        raise CheckpointCorrupt(path, f"version {doc.get('version')!r} is not {VERSION}")
    data = doc.get("data")
    if doc.get("checksum") != checksum(data):
        raise CheckpointCorrupt(path, "checksum mismatch (torn or edited file)")
    pods = data.get("pods") if isinstance(data, dict) else None
    if not isinstance(pods, dict):
        raise CheckpointCorrupt(path, "data.pods must be an object")
    out: list[PodRecord] = []
    for uid, item in pods.items():
        try:
            if not isinstance(item, dict) or not isinstance(item.get("pod"), str):
                raise ValueError("each pod needs a pod key and an allocation")
            restarted = item.get("restarted", {})
            if not isinstance(restarted, dict) or not all(isinstance(v, str) for v in restarted.values()):
                raise ValueError("restarted must map container names to IDs")
            arrival = item.get("arrival")
            if arrival is not None and (not isinstance(arrival, int) or isinstance(arrival, bool)):
                raise ValueError("arrival must be an integer or null")
            alloc = allocation_from_json(item.get("allocated"))
            out.append(
                PodRecord(
                    validate_pod_uid(uid), item["pod"], alloc, alloc, arrival=arrival, restarted=restarted
                )
            )
        except (ValueError, ModelError) as err:
            raise CheckpointCorrupt(path, f"pod {uid}: {err}") from err
    return out


class CheckpointStore:
    """Reads and atomically replaces `<state_dir>/resize-checkpoint.json`."""

    def __init__(self, state_dir: Path, name: str = CHECKPOINT_NAME) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / name

    def load(self) -> list[PodRecord] | None:
        """The checkpointed records; None when there is no checkpoint; CheckpointCorrupt when bad."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise CheckpointError(self.path, f"cannot read: {err.strerror}") from err
        return decode(self.path, raw)

    def quarantine(self) -> Path | None:
        """Move a corrupt checkpoint aside (kept for inspection); the next save writes a fresh one."""
        target = self.path.with_name(self.path.name + ".corrupt")
        try:
            self.path.replace(target)
        except FileNotFoundError:
            return None
        return target

    def save(self, records: Iterable[PodRecord]) -> None:
        """The single-file format of earlier releases (what a node being upgraded still has)."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self.path, encode(records))
        except OSError as err:
            raise CheckpointError(self.path, f"cannot write: {err.strerror or err}") from err
