"""Pin the guest venv to what the project's .venv has: runtime dependencies plus the test tools.

Run with the project's .venv python. Reads [project].dependencies from pyproject.toml, adds the
test-only packages, walks their requirements through the installed distributions' metadata
(markers evaluated for this interpreter) and prints one `name==version` line each, sorted. A
requirement whose distribution is not installed is printed as written (pip resolves it) and
reported on stderr. The output is both the pip requirements file and part of the image cache key.

usage: wheel_pins.py PYPROJECT [EXTRA_REQUIREMENT...]
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(roots: list[str]) -> tuple[dict[str, str], list[str]]:
    pinned: dict[str, str] = {}
    unresolved: list[str] = []
    todo: list[tuple[Requirement, frozenset[str]]] = [(Requirement(r), frozenset()) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, _ = todo.pop()
        name = canonicalize_name(req.name)
        extras = frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            unresolved.append(str(req))
            continue
        pinned[name] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is not None:
                envs = [{"extra": e} for e in sorted(extras)] or [{"extra": ""}]
                if not any(sub.marker.evaluate(env) for env in envs):
                    continue
            todo.append((sub, frozenset(sub.extras)))
    return pinned, unresolved


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    project = tomllib.loads(Path(argv[0]).read_text())["project"]
    roots = [*project.get("dependencies", []), *argv[1:]]
    pinned, unresolved = closure(roots)
    for req in unresolved:
        print(f"wheel_pins: {req} is not installed in this venv; pip will resolve it", file=sys.stderr)
    lines = sorted(f"{n}=={v}" for n, v in pinned.items()) + sorted(set(unresolved))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
