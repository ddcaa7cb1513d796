"""Property: whatever path components arrive, no write, mkdir or rmdir ever lands outside the owned root,
and nothing but a CgroupError comes back."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cgroupfs.errors import CgroupError
from cgroupfs.files import CgroupFiles
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree

OWNED = "cpu/kubepods"

HOSTILE = st.sampled_from(
    [
        "..",
        ".",
        "",
        "/",
        "\0",
        "\n",
        "../..",
        "../outside",
        "evil",  # symlink to a directory outside the tree
        "evilfile",  # symlink to a file outside the tree
        "up",  # symlink to the top of the tree
        "cpu",
        "kubepods",
        "memory",
        "burstable",
        "cpu.shares",
        "memory.limit_in_bytes",
        "x" * 300,
        "é" * 200,
        "\u202e\u200b",
        "ünïcødé",
        "🙂" * 70,
        "\ud800",
        "..\\..",
        " ",
    ]
)
COMPONENT = st.one_of(HOSTILE, st.text(max_size=12), st.text(alphabet="./\0\n\\ ", max_size=5))


@st.composite
def relpaths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(COMPONENT, max_size=6))
    prefix = draw(st.sampled_from(["", OWNED + "/", "/", "/" + OWNED + "/", "cpu/"]))
    return prefix + "/".join(parts)


def _build(base: Path) -> FakeCgroupTree:
    tree = FakeCgroupTree(base / "cgroupfs", "v1")
    tree.create(CgroupName(("kubepods", "burstable", "pod1")))
    outside = base / "outside"
    outside.mkdir()
    (outside / "target").write_text("precious\n")
    (outside / "cpu.shares").write_text("precious\n")
    owned = tree.path(OWNED)
    (owned / "evil").symlink_to(outside)
    (owned / "evilfile").symlink_to(outside / "target")
    (owned / "up").symlink_to("../..")
    return tree


def _snapshot(base: Path) -> dict[str, str | bytes]:
    """Every entry below `base` (symlinks recorded, never followed) -> its content or kind."""
    out: dict[str, str | bytes] = {}
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(base))
            if path.is_symlink():
                out[rel] = "link->" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out


def _outside_owned(snapshot: dict[str, str | bytes]) -> dict[str, str | bytes]:
    owned = f"cgroupfs/{OWNED}/"
    return {k: v for k, v in snapshot.items() if not k.startswith(owned)}


def test_hostile_paths_never_escape_the_owned_root(tmp_path: Path) -> None:
    tree = _build(tmp_path)
    files = CgroupFiles(tree.root, (OWNED,))
    before = _outside_owned(_snapshot(tmp_path))
    assert f"cgroupfs/{OWNED}" in before and "outside/target" in before
    outcomes: dict[str, int] = {"ok": 0, "refused": 0}

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(relpath=relpaths(), op=st.sampled_from(["write", "mkdir", "rmdir", "read", "exists"]))
    @example(relpath=f"{OWNED}/evil/target", op="write")
    @example(relpath=f"{OWNED}/evilfile", op="write")
    @example(relpath=f"{OWNED}/up/memory/memory.limit_in_bytes", op="write")
    @example(relpath=f"{OWNED}/../../outside/target", op="write")
    @example(relpath=f"{OWNED}/evil/new", op="mkdir")
    @example(relpath=f"{OWNED}/up/memory", op="rmdir")
    @example(relpath=f"{OWNED}/burstable/cpu.shares", op="write")  # allowed: the property is not vacuous
    def attempt(relpath: str, op: str) -> None:
        try:
            if op == "write":
                files.write(relpath, "2")
            elif op == "mkdir":
                files.mkdir(relpath)
            elif op == "rmdir":
                files.rmdir(relpath)
            elif op == "read":
                files.read(relpath)
            else:
                files.exists(relpath)
            outcomes["ok"] += 1
        except CgroupError as err:
            assert "\n" not in str(err)
            outcomes["refused"] += 1
        assert _outside_owned(_snapshot(tmp_path)) == before

    attempt()
    # the property saw both sides: some operations went through, many were refused
    assert outcomes["ok"] > 0
    assert outcomes["refused"] > 0
    assert (tmp_path / "outside" / "target").read_text() == "precious\n"


def test_the_symlinks_under_the_owned_root_really_point_outside(tmp_path: Path) -> None:
    # guards the property above against a fixture that would make it vacuous
    tree = _build(tmp_path)
    assert (tree.path(OWNED) / "evil" / "target").read_text() == "precious\n"
    assert (tree.path(OWNED) / "evilfile").read_text() == "precious\n"
    assert (tree.path(OWNED) / "up" / "memory").is_dir()


def _outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except CgroupError as err:
        return type(err), str(err)


def test_read_many_confines_every_path_as_read_does(tmp_path: Path, both_openers: str) -> None:
    """read_many checks a directory and a file name once for all the paths that share them: whatever the
    paths, it answers what read() answers for each, or refuses with what read() says of one of them."""
    tree = _build(tmp_path)
    tree.set(f"{OWNED}/burstable/cpu.shares", "2")
    files = CgroupFiles(tree.root, (OWNED,))
    good = [f"{OWNED}/burstable/cpu.shares", f"{OWNED}/burstable/pod1/cpu.shares", f"{OWNED}/cpu.shares"]

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(paths=st.lists(st.one_of(relpaths(), st.sampled_from(good)), max_size=5))
    @example(paths=[f"{OWNED}/burstable/cpu.shares", f"{OWNED}/burstable//cpu.shares"])
    @example(paths=[f"{OWNED}/burstable/cpu.shares", f"{OWNED}/burstable/" + "x" * 256])
    @example(paths=[f"{OWNED}/" + "/".join(["y" * 250] * 16) + "/cpu.shares"])
    @example(paths=[f"{OWNED}/" + "/".join(["é" * 100] * 19) + "/" + "é" * 45])
    @example(paths=[OWNED, f"{OWNED}/evil/cpu.shares"])
    @example(paths=[f"{OWNED}/evil/evil"])  # the error names the file, not its directory
    @example(paths=[f"{OWNED}/burstable/cpu.shares", f"{OWNED}/burstable/../cpu.shares"])
    @example(paths=[f"{OWNED}/burstable/cpu.shares", f"{OWNED}/burstable/pod1\n/cpu.shares"])
    def attempt(paths: list[str]) -> None:
        each = {p: _outcome(lambda p=p: files.read(p)) for p in paths}
        many = _outcome(lambda: files.read_many(paths)[0])
        if isinstance(many, dict):
            assert many == each
        else:
            assert many in each.values()

    attempt()
