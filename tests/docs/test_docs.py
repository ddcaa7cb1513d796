"""The documentation as a new user meets it: every relative link of README.md and docs/*.md resolves (the file
exists; a `#anchor` is a heading of the target, by GitHub's rules), every command block is marked with how
it is tested and those that can run here do, the README's set-up commands are the ones CI runs, the
configuration reference is what its generator writes, and every metric the agent exports is documented.

A command block is a fenced `sh` or `console` block; the comment line before it says how it is tested:

    <!-- example: run -->       run here, from the repository's root, `.venv/bin` first on the PATH. A `sh`
                                line ends with `# exit N` when N, not 0, is its exit code; a `console`
                                block's `$ ` lines are run and what follows each is exactly what it prints.
    <!-- example: KIND -->      not run here, for the reason NOT_RUN gives for KIND.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_RUN = {
    "cluster": "needs a Kubernetes cluster: kubectl apply, exec and label talk to an API server and its nodes, "
    "and the image is imported on each node; make e2e-k8s installs deploy/ this way on a real v1.36 cluster",
    "host": "installs into /opt, /usr/local/bin and /etc as root and starts a unit under systemd as PID 1: "
    "it would change this machine (whose PID 1 is not systemd); tests/daemon/test_deploy.py verifies the unit "
    "with systemd-analyze, and the v2 guest of make e2e-v2 runs systemd",
    "install": "installs the package into the reader's own environment (pip, pipx) and asks kubectl for its "
    "plugins: `make run` installs this checkout the same way, and tests/plugin runs the plugin against a fake kubectl",
    "kit": "builds Kubernetes from source for the real-cluster suite (minutes, root, outside CI)",
    "output": "an excerpt of an output (elided with ...) from inputs the reader supplies",
}
RUN = "run"
COMMAND_BLOCKS = ("sh", "console")
FENCE = re.compile(r"^(```|~~~)\s*([\w-]*)")
MARKER = re.compile(r"^<!--\s*example:\s*([\w-]+)\s*-->$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    info: str
    marker: str | None
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _parse(page: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """The page's fenced blocks, and its other lines (with their numbers): prose, headings, tables."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        start, fence, body = i, m.group(1), []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        before = next((prose_line for _, prose_line in reversed(prose) if prose_line.strip()), "")
        marker = MARKER.match(before.strip())
        blocks.append(Block(page, start + 1, m.group(2), marker.group(1) if marker else None, "\n".join(body)))
        prose.append((start + 1, ""))  # the block is not prose; a marker must sit right above its own block
        i += 1
    return blocks, prose


def _blocks() -> list[Block]:
    return [b for page in PAGES for b in _parse(page)[0]]


# ---- links


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lower case, without punctuation, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _parse(page)[1]:
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, line in _parse(page)[1]:
        for target in LINK.findall(CODE_SPAN.sub("code", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # a URL: not checked offline
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{_name(page)}:{number}: {target}"
            if not resolved.exists():
                problems.append(f"{where}: no such file")
            elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
                problems.append(f"{where}: no heading #{anchor} there")
    return problems


def test_every_relative_link_resolves() -> None:
    assert [p for page in PAGES for p in broken_links(page)] == []


def test_the_slugs_follow_githubs_rules(tmp_path: Path) -> None:
    assert slug("The daemon (`kube-cgroup-agent run`)") == "the-daemon-kube-cgroup-agent-run"
    assert slug("Where the kubelet's own paths disagree, and what the agent does") == (
        "where-the-kubelets-own-paths-disagree-and-what-the-agent-does")
    assert slug("11. A `pods/resize` call — the agent") == "11-a-podsresize-call--the-agent"
    assert slug("`recommender:`") == "recommender"
    page = tmp_path / "p.md"
    page.write_text("# A\n## Notes\n```sh\n# Notes\n```\n## Notes\n[x](#notes-1) [y](#notes-2) [z](q.md)\n")
    assert anchors(page) == {"a", "notes", "notes-1"}
    assert [p.split(": ", 1)[1] for p in broken_links(page)] == ["#notes-2: no heading #notes-2 there",
                                                               "q.md: no such file"]


def test_no_code_or_manifest_points_at_a_readme_section() -> None:
    """The README's sections moved to docs/: a comment naming one ("README, "At scale"") would now mislead."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    stale = re.compile(r"README,? [\"'“]|README: \"")
    found = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or name == "tests/docs/test_docs.py" or path.suffix in {".json", ".svg"}:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if stale.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []


# ---- command blocks


def test_every_command_block_says_how_it_is_tested() -> None:
    unmarked = [str(b) for b in _blocks() if b.info in COMMAND_BLOCKS and b.marker is None]
    unknown = [f"{b}: {b.marker}" for b in _blocks() if b.marker is not None and b.marker not in {RUN, *NOT_RUN}]
    assert (unmarked, unknown) == ([], []), (
        "put <!-- example: run --> (run by this test) or <!-- example: KIND --> (KIND one of "
        f"{', '.join(NOT_RUN)}: not run, for the reason NOT_RUN gives) on the line above each sh or console block")
    assert [str(b) for b in _blocks() if b.marker == "output" and b.info != "console"] == []


def _env() -> dict[str, str]:
    venv_bin = ROOT / ".venv" / "bin"
    path = os.pathsep.join([str(venv_bin), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCG_")}
    return env | {"PATH": path, "NODE_NAME": "", "COLUMNS": "200"}


def sh_commands(text: str) -> list[tuple[str, int]]:
    """Each command of a `sh` block (continued lines joined) with the exit code its `# exit N` says."""
    commands, current = [], ""
    for raw in text.splitlines():
        current += raw.strip() if current else raw.rstrip()
        if current.endswith("\\"):
            current = current[:-1].rstrip() + " "
            continue
        line, current = current.strip(), ""
        if not line or line.startswith("#"):
            continue
        m = re.search(r"\s#\s*exit (\d+)", line)
        commands.append((line, int(m.group(1)) if m else 0))
    return commands


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """Each `$ ` command of a `console` block (continued lines joined) and the lines it prints."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise ValueError(f"a console block's output comes after a `$ ` line: {lines[i]!r}")
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        printed = []
        while i < len(lines) and not lines[i].startswith("$ "):
            printed.append(lines[i])
            i += 1
        out.append((command, printed))
    return out


def _run(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)


RUN_BLOCKS = [b for b in _blocks() if b.marker == RUN]


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=str)
def test_each_command_that_can_run_here_runs(block: Block) -> None:
    if not (ROOT / ".venv" / "bin" / "kube-cgroup-agent").exists():
        pytest.skip("no .venv: the examples follow `make run`, which makes it")
    assert block.info in COMMAND_BLOCKS
    if block.info == "sh":
        for command, code in sh_commands(block.text):
            done = _run(command)
            assert (done.returncode, "Traceback" in done.stderr) == (code, False), (command, done.stderr)
            assert done.stdout.strip(), command  # each says something
        return
    for command, printed in console_commands(block.text):
        done = _run(command)
        assert done.returncode == 0, (command, done.stderr)
        assert [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()] == [
            line.rstrip() for line in printed], command


def test_the_examples_that_run_here_include_the_readmes_and_the_sample_trace() -> None:
    run = {b.page.relative_to(ROOT).as_posix() for b in RUN_BLOCKS}
    assert {"README.md", "docs/commands.md", "docs/recommender.md", "docs/admission.md"} <= run


def test_the_parsers_of_command_blocks() -> None:
    assert sh_commands("a --x \\\n  --y   # exit 1: differs\n# a comment\n\nb") == [
        ("a --x --y   # exit 1: differs", 1), ("b", 0)]
    assert console_commands("$ a \\\n    b\nout 1\nout 2\n$ c") == [("a b", ["out 1", "out 2"]), ("c", [])]


def _makefile_run_command() -> str:
    """The command `make run` runs, its variables expanded."""
    text = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+)\s*:?=\s*(.*?)\s*$", text, re.M))
    recipe = re.search(r"^run:.*\n\t@?(.*)$", text, re.M)
    assert recipe is not None
    command = recipe.group(1).split(";")[0]
    for _ in range(3):
        command = re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], command)
    return " ".join(shlex.split(command))


def test_the_readmes_cli_quick_start_is_what_make_run_runs() -> None:
    readme = [b for b in RUN_BLOCKS if b.page.name == "README.md" and b.info == "sh"]
    commands = {" ".join(shlex.split(c.split("#")[0])) for b in readme for c, _ in sh_commands(b.text)}
    assert _makefile_run_command() in commands


def test_the_set_up_commands_are_those_ci_runs() -> None:
    """`.ci/run` runs "the README's test commands": the Set up section's block, as it stands."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    setup = next(b for b in _parse(ROOT / "README.md")[0] if f"```\n{b.text}\n```" in section)
    assert setup.text.splitlines() == ["make run", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_pages_not_run_here_say_why() -> None:
    kinds = {b.marker for b in _blocks()} - {None, RUN}
    assert kinds <= set(NOT_RUN)
    assert all(NOT_RUN[k] for k in kinds)


# ---- the configuration reference


def test_the_configuration_reference_is_what_its_generator_writes() -> None:
    from agent.config import reference

    page = reference.PAGE.read_text()
    assert reference.render(page) == page, "docs/configuration.md is stale: run python -m agent.config.reference"


def test_every_shown_default_is_a_value_its_key_takes_and_gives_the_default_back() -> None:
    from agent.config import reference
    from agent.config.settings import Settings, from_mapping

    checked = 0
    for section in reference.sections():
        defaults = section.settings()
        for row in reference.rows(section):
            m = re.fullmatch(r"`([^`]*)`", row.default)
            if not m:
                continue  # words: "unset", "the node's"
            key = row.key.removeprefix(section.prefix)
            *inner, last = key.split(".")  # vpa.react.oom: a map within the section
            raw: dict[str, Any] = {last: yaml.safe_load(m.group(1))}
            for name in reversed(inner):
                raw = {name: raw}
            path = section.prefix[:-1].split(".") if section.prefix else []  # recommender.prometheus: nested
            for name in reversed(path):
                raw = {name: raw}
            settings: Any = from_mapping(raw)
            for name in path:
                settings = getattr(settings, name)
            name = section.keys[key]
            assert getattr(settings, name) == getattr(defaults, name), row
            checked += 1
    assert checked > 60
    assert Settings() == from_mapping({})


def test_the_generator_refuses_a_key_without_a_doc_and_a_page_without_markers() -> None:
    from dataclasses import dataclass as dc
    from dataclasses import field

    from agent.config import reference
    from agent.infra.configsection import doc

    @dc(frozen=True)
    class Some:
        told: int = field(default=3, metadata=doc("said"))
        untold: int = 4

    section = reference.Section("x", "x.", Some, {"told": "told", "untold": "untold"})
    with pytest.raises(ValueError, match=r"x\.untold: its field Some\.untold has no doc"):
        reference.rows(section)
    assert [f.name for f in fields(Some)] == ["told", "untold"]
    with pytest.raises(ValueError, match="no generated part"):
        reference.render("# a page\n")


# ---- metrics


def test_every_metric_the_agent_exports_is_documented() -> None:
    from agent.infra.metrics import KeeperMetrics, Metrics

    page = (ROOT / "docs" / "observability.md").read_text()
    names = set()
    for metrics in (Metrics(), KeeperMetrics()):
        for family in metrics.registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    assert {n for n in names if f"`{n}`" not in page} == set()
    assert len(names) >= 20
