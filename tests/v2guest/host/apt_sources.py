"""Print the host's Debian archive entries as one-line `deb` sources for mmdebstrap.

The guest is built from the same archive the host's apt uses, so no mirror is named in this
repository: the entries are read at run time from /etc/apt/sources.list, sources.list.d/*.list
(one-line format) and sources.list.d/*.sources (deb822). Only `deb` entries whose suites belong to
the host's release (`bookworm`, `bookworm-updates`, `bookworm-security`, ...) are kept, so third-party
repositories are left out. Each output line is `deb URI SUITE COMPONENTS...`; exit code 1 when none.

usage: apt_sources.py [--root /] [--codename bookworm]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Entry:
    uri: str
    suite: str
    components: tuple[str, ...]

    def line(self) -> str:
        return " ".join(("deb", self.uri, self.suite, *self.components))


def _one_line(text: str) -> list[Entry]:
    out: list[Entry] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            out.append(Entry(words[0].rstrip("/"), words[1], tuple(words[2:])))
    return out


def _deb822(text: str) -> list[Entry]:
    out: list[Entry] = []
    stanzas: list[dict[str, str]] = [{}]
    key = ""
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if stanzas[-1]:
                stanzas.append({})
            continue
        if raw[0].isspace() and key:
            stanzas[-1][key] += " " + raw.strip()
            continue
        if ":" in raw:
            key, value = raw.split(":", 1)
            key = key.strip().lower()
            stanzas[-1][key] = value.strip()
    for stanza in stanzas:
        if "deb" not in stanza.get("types", "").split():
            continue
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        for uri in stanza.get("uris", "").split():
            for suite in stanza.get("suites", "").split():
                out.append(Entry(uri.rstrip("/"), suite, tuple(stanza.get("components", "").split())))
    return out


def host_codename(root: Path) -> str:
    for line in (root / "etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise SystemExit("apt_sources: no VERSION_CODENAME in /etc/os-release")


def entries(root: Path, codename: str) -> list[Entry]:
    apt = root / "etc/apt"
    found: list[Entry] = []
    main = apt / "sources.list"
    if main.is_file():
        found += _one_line(main.read_text())
    parts = apt / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list":
                found += _one_line(path.read_text())
            elif path.suffix == ".sources":
                found += _deb822(path.read_text())
    wanted = [
        e
        for e in found
        if e.suite == codename or e.suite.startswith(codename + "-") or e.suite.startswith(codename + "/")
    ]
    unique: list[Entry] = []
    for e in wanted:
        if e not in unique:
            unique.append(e)
    return unique


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/", type=Path)
    parser.add_argument("--codename", default=None)
    args = parser.parse_args(argv)
    codename = args.codename or host_codename(args.root)
    lines = [e.line() for e in entries(args.root, codename)]
    if not lines:
        print(f"apt_sources: no deb entries for {codename} in the host's apt configuration", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
