"""Read Pod manifests: a file, a directory of files, or stdin; YAML (multi-document) or JSON; a single
Pod, or a List/PodList as `kubectl get pods -o json` prints it. One unreadable document or bad pod is
reported and the others still load."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from agent.errors import PermanentError
from agent.model import PodView, Problem
from agent.pods.parse import PodParseError, parse_pod, pod_key
from agent.sources import DEFAULT_SOURCES, Source

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Loaded:
    pods: tuple[PodView, ...]
    errors: tuple[Problem, ...]


class SourceError(PermanentError, OSError):
    """The pod source itself cannot be read (missing path, unreadable file)."""


def _documents(text: str, origin: str) -> Iterator[object]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            yield json.loads(text)
            return
        except json.JSONDecodeError:
            pass  # YAML is a superset of JSON: let the YAML parser give the error
    import yaml

    try:
        yield from yaml.safe_load_all(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise PodParseError(origin, f"not valid YAML or JSON{where}: {getattr(err, 'problem', err)}") from err


def _items(doc: object, origin: str) -> Iterator[Mapping[str, Any]]:
    if doc is None:
        return
    if isinstance(doc, list):
        for d in doc:
            yield from _items(d, origin)
        return
    if not isinstance(doc, Mapping):
        raise PodParseError(origin, "a document must be a Pod or a List of Pods")
    kind = doc.get("kind")
    if kind in ("List", "PodList") or (kind is None and isinstance(doc.get("items"), list)):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise PodParseError(origin, "items must be a list")
        for item in items:
            if isinstance(item, Mapping) and item.get("kind") is None and kind == "PodList":
                item = {**item, "kind": "Pod"}
            yield from _items(item, origin)
        return
    yield doc


def objects(text: str, origin: str) -> list[Mapping[str, Any]]:
    """Every object of a YAML/JSON text (multi-document, Lists unwrapped), whatever its kind; PodParseError
    names the origin when the text or a document cannot be read."""
    return [item for doc in _documents(text, origin) for item in _items(doc, origin)]


def parse_text(text: str, origin: str, sources: Sequence[Source] = DEFAULT_SOURCES) -> Loaded:
    pods: list[PodView] = []
    errors: list[Problem] = []
    try:
        docs = list(_documents(text, origin))
    except PodParseError as err:
        return Loaded((), (Problem(None, f"{origin}: {err.message}"),))
    for doc in docs:
        try:
            items = list(_items(doc, origin))
        except PodParseError as err:
            errors.append(Problem(None, f"{origin}: {err.message}"))
            continue
        for item in items:
            try:
                pods.append(parse_pod(item, sources))
            except PodParseError as err:
                errors.append(Problem(err.pod, err.message))
    return Loaded(tuple(pods), tuple(errors))


def _unique(loaded: Loaded) -> Loaded:
    """Two manifests with one UID would fight over one cgroup: the first wins, the next is an error."""
    seen: dict[str, str] = {}
    pods: list[PodView] = []
    errors = list(loaded.errors)
    for p in loaded.pods:
        if p.uid in seen:
            errors.append(Problem(p.key, f"pod UID {p.uid} is also used by {seen[p.uid]}: ignored"))
            continue
        seen[p.uid] = p.key
        pods.append(p)
    return Loaded(tuple(pods), tuple(errors))


def load_path(path: str, stdin: TextIO | None = None, sources: Sequence[Source] = DEFAULT_SOURCES) -> Loaded:
    """`-` is stdin; a directory is read file by file in name order (manifest suffixes only)."""
    if path == "-":
        return _unique(parse_text((stdin or sys.stdin).read(), "<stdin>", sources))
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in MANIFEST_SUFFIXES)
    elif p.exists():
        files = [p]
    else:
        raise SourceError(f"pod source {path} does not exist")
    pods: list[PodView] = []
    errors: list[Problem] = []
    for f in files:
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError) as err:
            errors.append(Problem(None, f"{f}: cannot read: {err}"))
            continue
        loaded = parse_text(text, str(f), sources)
        pods.extend(loaded.pods)
        errors.extend(loaded.errors)
    return _unique(Loaded(tuple(pods), tuple(errors)))


def from_objects(objects: list[Any], sources: Sequence[Source] = DEFAULT_SOURCES) -> Loaded:
    """Pods as the kubernetes client returns them (V1Pod) or as plain dicts."""
    pods: list[PodView] = []
    errors: list[Problem] = []
    serializer = None
    for obj in objects:
        if not isinstance(obj, Mapping):
            if serializer is None:
                from kubernetes.client import ApiClient

                serializer = ApiClient()
            obj = serializer.sanitize_for_serialization(obj)
        try:
            pods.append(parse_pod({"kind": "Pod", **obj}, sources))
        except PodParseError as err:
            errors.append(Problem(err.pod if err.pod else pod_key(obj), err.message))
    return _unique(Loaded(tuple(pods), tuple(errors)))
