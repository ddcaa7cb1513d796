"""Read Pod manifests: a file, a directory of files, or stdin; YAML (multi-document) or JSON; a single
Pod, or a List/PodList as `kubectl get pods -o json` prints it. One unreadable document or bad pod is
reported and the others still load."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from agent.core.model import PodView, Problem
from agent.infra.errors import PermanentError
from agent.pods.parse import PodParseError, parse_pod, pod_key
from agent.pods.sources import DEFAULT_SOURCES, Source
from agent.pods.sources.base import MAPS
from agent.pods.sources.limitrange import LimitRanges

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Loaded:
    """The pods read from a source, and the problems of those that could not be."""

    pods: tuple[PodView, ...]
    errors: tuple[Problem, ...]
    warnings: tuple[str, ...] = ()  # LimitRanges in the input that could not be read (left out)


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
    if not isinstance(doc, MAPS):
        raise PodParseError(origin, "a document must be a Pod or a List of Pods")
    kind = doc.get("kind")
    if kind in ("List", "PodList", "LimitRangeList") or (kind is None and isinstance(doc.get("items"), list)):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise PodParseError(origin, "items must be a list")
        for item in items:
            if isinstance(item, MAPS) and item.get("kind") is None and kind in ("PodList", "LimitRangeList"):
                item = {**item, "kind": kind.removesuffix("List")}
            yield from _items(item, origin)
        return
    yield doc


def split_limit_ranges(objects: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """(everything else, the LimitRange objects): the input may carry the namespaces' LimitRanges beside
    the pods (`kubectl get pods,limitranges -A -o yaml`), which bound the annotations."""
    others: list[Mapping[str, Any]] = []
    limit_ranges: list[Mapping[str, Any]] = []
    for obj in objects:
        (limit_ranges if obj.get("kind") == "LimitRange" else others).append(obj)
    return others, limit_ranges


def objects(text: str, origin: str) -> list[Mapping[str, Any]]:
    """Every object of a YAML/JSON text (multi-document, Lists unwrapped), whatever its kind; PodParseError
    names the origin when the text or a document cannot be read."""
    return [item for doc in _documents(text, origin) for item in _items(doc, origin)]


def _read(text: str, origin: str) -> tuple[list[Mapping[str, Any]], list[Problem]]:
    """The objects of one text, and a problem per document that cannot be read."""
    try:
        docs = list(_documents(text, origin))
    except PodParseError as err:
        return [], [Problem(None, f"{origin}: {err.message}")]
    objects: list[Mapping[str, Any]] = []
    errors: list[Problem] = []
    for doc in docs:
        try:
            objects.extend(_items(doc, origin))
        except PodParseError as err:
            errors.append(Problem(None, f"{origin}: {err.message}"))
    return objects, errors


def _parse(objects: list[Mapping[str, Any]], errors: list[Problem], sources: Sequence[Source], limit_ranges: LimitRanges | None) -> Loaded:
    """The pods among `objects`; their LimitRanges first go to `limit_ranges` (left out when it is None)."""
    items, found = split_limit_ranges(objects)
    warnings = limit_ranges.replace_objects(found)[1] if limit_ranges is not None else []
    pods: list[PodView] = []
    for item in items:
        try:
            pods.append(parse_pod(item, sources))
        except PodParseError as err:
            errors.append(Problem(err.pod, err.message))
    return Loaded(tuple(pods), tuple(errors), tuple(warnings))


def parse_text(
    text: str, origin: str, sources: Sequence[Source] = DEFAULT_SOURCES, limit_ranges: LimitRanges | None = None
) -> Loaded:
    return _parse(*_read(text, origin), sources, limit_ranges)


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
    return Loaded(tuple(pods), tuple(errors), loaded.warnings)


def load_path(
    path: str, stdin: TextIO | None = None, sources: Sequence[Source] = DEFAULT_SOURCES, limit_ranges: LimitRanges | None = None
) -> Loaded:
    """`-` is stdin; a directory is read file by file in name order (manifest suffixes only). LimitRange
    objects anywhere in the input go to `limit_ranges` before any pod is parsed."""
    if path == "-":
        return _unique(parse_text((stdin or sys.stdin).read(), "<stdin>", sources, limit_ranges))
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in MANIFEST_SUFFIXES)
    elif p.exists():
        files = [p]
    else:
        raise SourceError(f"pod source {path} does not exist")
    objects: list[Mapping[str, Any]] = []
    errors: list[Problem] = []
    for f in files:
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError) as err:
            errors.append(Problem(None, f"{f}: cannot read: {err}"))
            continue
        found, problems = _read(text, str(f))
        objects.extend(found)
        errors.extend(problems)
    return _unique(_parse(objects, errors, sources, limit_ranges))


def from_objects(objects: list[Any], sources: Sequence[Source] = DEFAULT_SOURCES) -> Loaded:
    """Pods as the kubernetes client returns them (V1Pod) or as plain dicts."""
    pods: list[PodView] = []
    errors: list[Problem] = []
    serializer = None
    for obj in objects:
        if not isinstance(obj, MAPS):
            if serializer is None:
                from kubernetes.client import ApiClient

                serializer = ApiClient()
            obj = serializer.sanitize_for_serialization(obj)
        try:
            pods.append(parse_pod({"kind": "Pod", **obj}, sources))
        except PodParseError as err:
            errors.append(Problem(err.pod if err.pod else pod_key(obj), err.message))
    return _unique(Loaded(tuple(pods), tuple(errors)))
