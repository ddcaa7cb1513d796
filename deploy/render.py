#!/usr/bin/env python3
"""Render a kustomization of this repository as `kubectl kustomize` would, for the features it uses.

    python3 deploy/render.py                      # rewrite deploy/daemonset.yaml from deploy/ (the base)
    python3 deploy/render.py --check              # exit 1 when deploy/daemonset.yaml is not what deploy/ renders
    python3 deploy/render.py deploy/overlays/bare-node   # print an overlay's objects

Why not kustomize itself: the flat file must be regenerated and checked on machines that have no kubectl;
the features used here are few (`resources` files and directories, `images` by name, JSON 6902 `patches`
with a kind/name target) and are implemented exactly; anything else in a kustomization is refused, so
this renderer can never silently differ from kustomize. Where kubectl is installed, a test compares the two.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent
FLAT = DEPLOY / "daemonset.yaml"
SUPPORTED = {"apiVersion", "kind", "resources", "images", "patches"}
HEADER = """\
# kube-cgroup-agent on every node: `kubectl apply -f deploy/daemonset.yaml`.
# GENERATED from the kustomize base in deploy/ by `python3 deploy/render.py`: edit deploy/base/ (the image
# tag: deploy/base/kustomization.yaml), then run it (a test fails when this file differs from what deploy/ renders).
# A new RBAC rule: one item, with a comment saying why, in deploy/base/rbac.yaml.
# The image: `make image` builds kube-cgroup-agent:<version> as an OCI archive (docs/installation.md, "The image").
"""


class RenderError(ValueError):
    pass


def _docs(path: Path) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is not None:
            yield doc


def render(directory: Path) -> list[dict[str, Any]]:
    kfile = directory / "kustomization.yaml"
    k = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(k) - SUPPORTED
    if unknown:
        raise RenderError(f"{kfile}: unsupported fields {sorted(unknown)} (extend deploy/render.py first)")
    objects: list[dict[str, Any]] = []
    for res in k.get("resources") or []:
        path = (directory / res).resolve()
        objects.extend(render(path) if path.is_dir() else _docs(path))
    for image in k.get("images") or []:
        for obj in objects:
            _set_image(obj, image)
    for patch in k.get("patches") or []:
        target = patch.get("target") or {}
        if set(patch) - {"target", "patch"} or set(target) - {"kind", "name"}:
            raise RenderError(f"{kfile}: only JSON 6902 patches with a kind/name target are supported")
        ops = yaml.safe_load(patch["patch"])
        matched = [o for o in objects if o.get("kind") == target.get("kind") and o["metadata"]["name"] == target.get("name")]
        if not matched:
            raise RenderError(f"{kfile}: patch target {target} matches nothing")
        for obj in matched:
            _json_patch(obj, ops)
    return objects


def _set_image(obj: dict[str, Any], image: dict[str, Any]) -> None:
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        name, _, tag = str(c.get("image", "")).partition(":")
        if name != image["name"]:
            continue
        new_name = image.get("newName", name)
        new_tag = str(image["newTag"]) if "newTag" in image else tag
        c["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def _json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last: Any = parts[-1]
        if isinstance(parent, list):
            last = len(parent) if last == "-" else int(last)
        if op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(op["value"]))
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace" and (isinstance(parent, dict) and last not in parent):
                raise RenderError(f"replace {op['path']}: no such field")
            parent[last] = copy.deepcopy(op["value"])
        else:
            raise RenderError(f"JSON patch op {op['op']!r} is not supported")


def _rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for o in objects if o.get("kind") == "ClusterRole" for r in o.get("rules") or []]


def stale_reasons(flat: list[dict[str, Any]], rendered: list[dict[str, Any]]) -> list[str]:
    """Why the flat file differs, in terms an editor can act on: a rule or object edited into the flat file
    (which is generated) is named with the base file it belongs in."""
    reasons = [
        f"ClusterRole rule {rule} is in deploy/daemonset.yaml but not in deploy/base/rbac.yaml: move it there"
        " (with the comment saying why)"
        for rule in _rules(flat)
        if rule not in _rules(rendered)
    ]
    ours = {(o.get("kind"), (o.get("metadata") or {}).get("name")): o for o in rendered}
    for obj in flat:
        key = (obj.get("kind"), (obj.get("metadata") or {}).get("name"))
        if key not in ours:
            reasons.append(f"{key[0]} {key[1]} is in deploy/daemonset.yaml only: add it to deploy/base/")
        elif obj != ours[key] and key[0] != "ClusterRole":
            reasons.append(f"{key[0]} {key[1]} differs from deploy/base/: edit it there")
    return reasons


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(objects: list[dict[str, Any]]) -> str:
    return "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=120) for o in objects)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", nargs="?", type=Path)
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    try:
        if args.directory is not None:
            sys.stdout.write(dump(render(args.directory)))
            return 0
        text = HEADER + dump(render(DEPLOY))
    except (RenderError, OSError, KeyError, IndexError, yaml.YAMLError) as err:
        print(f"render: {err}", file=sys.stderr)
        return 2
    if args.check:
        if FLAT.read_text() != text:
            for line in stale_reasons(list(_docs(FLAT)), render(DEPLOY)):
                print(f"render: {line}", file=sys.stderr)
            print("deploy/daemonset.yaml is not what deploy/ renders: run python3 deploy/render.py", file=sys.stderr)
            return 1
        return 0
    FLAT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
