"""deploy/image/oci.py: the same trees give the same bytes whatever their mtimes, build user or directory
order; the archive is an OCI layout plus docker's manifest.json; owners are normalised to root except the
state directory's root:nonroot."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives files other owners (root only)")

REPO = Path(__file__).resolve().parents[2]
OCI = REPO / "deploy" / "image" / "oci.py"
NONROOT = 65532


def _tree(root: Path, mtime: int, build_uid: int, reverse: bool) -> None:
    names = ["b", "a", "c"] if reverse else ["a", "b", "c"]
    for name in names:
        (root / "opt" / name).mkdir(parents=True)
        (root / "opt" / name / "f").write_text(name)
    state = root / "var" / "lib" / "kube-cgroup-agent"
    state.mkdir(parents=True)
    os.chown(state, 0, NONROOT)
    os.chown(root / "opt" / "a" / "f", build_uid, build_uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for n in [*dirnames, *filenames]:
            os.utime(Path(dirpath) / n, (mtime, mtime))


def _build(tmp: Path, tree: Path) -> tuple[str, bytes]:
    out = tmp / f"{tree.parent.name}.tar"
    r = subprocess.run(
        [sys.executable, str(OCI), str(out), "--layer", str(tree), "--tag", "kube-cgroup-agent:9.9.9",
         "--epoch", "1700000000", "--entrypoint", '["/usr/bin/python3","-m","agent"]',
         "--label", "org.opencontainers.image.version=9.9.9"],
        capture_output=True, text=True, check=True,
    )
    return r.stdout.strip(), out.read_bytes()


def test_two_builds_of_the_same_trees_are_byte_identical(tmp_path: Path) -> None:
    one, two = tmp_path / "one" / "root", tmp_path / "two" / "root"  # the history names the leaf, as build.sh's
    _tree(one, mtime=1_000, build_uid=1000, reverse=False)
    _tree(two, mtime=2_000_000, build_uid=0, reverse=True)  # other times, owner and creation order
    (d1, b1), (d2, b2) = _build(tmp_path, one), _build(tmp_path, two)
    assert d1.startswith("sha256:") and d1 == d2
    assert b1 == b2


def test_the_archive_is_an_oci_layout_that_docker_load_reads_too(tmp_path: Path) -> None:
    tree = tmp_path / "only" / "root"
    _tree(tree, mtime=5, build_uid=1000, reverse=False)
    digest, data = _build(tmp_path, tree)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    index = json.loads(files["index.json"])
    [entry] = index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/kube-cgroup-agent:9.9.9"
    manifest = json.loads(files["blobs/sha256/" + digest.split(":")[1]])
    [docker] = json.loads(files["manifest.json"])
    assert docker["RepoTags"] == ["kube-cgroup-agent:9.9.9"]
    assert docker["Config"] == "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]
    assert manifest["annotations"] == {"org.opencontainers.image.version": "9.9.9"}
    [layer] = manifest["layers"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(files["blobs/sha256/" + layer["digest"].split(":")[1]]))) as lt:
        members = {m.name: m for m in lt.getmembers()}
    assert list(members) == sorted(members, key=lambda n: n.split("/"))  # sorted, parents first
    assert {m.mtime for m in members.values()} == {1700000000}
    assert (members["opt/a/f"].uid, members["opt/a/f"].gid) == (0, 0)  # the build user's file: root's
    state = members["var/lib/kube-cgroup-agent"]
    assert (state.uid, state.gid) == (0, NONROOT) and not state.uname and not state.gname
