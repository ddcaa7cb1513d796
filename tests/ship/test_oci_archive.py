"""deploy/image/oci.py: the same trees give the same bytes whatever their mtimes, build user or directory
order; the archive is an OCI layout plus docker's manifest.json; owners are normalised to root except the
state directory's root:nonroot. With --platform, one image index of a manifest per platform (make image's
amd64 and arm64), every digest and size consistent with the blob it names."""

from __future__ import annotations

import gzip
import hashlib
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


COMMON = ["--tag", "kube-cgroup-agent:9.9.9", "--epoch", "1700000000", "--entrypoint", '["/usr/bin/python3","-m","agent"]',
          "--label", "org.opencontainers.image.version=9.9.9"]


def _build(tmp: Path, tree: Path) -> tuple[str, bytes]:
    out = tmp / f"{tree.parent.name}.tar"
    r = subprocess.run([sys.executable, str(OCI), str(out), "--layer", str(tree), *COMMON],
                       capture_output=True, text=True, check=True)
    return r.stdout.strip(), out.read_bytes()


def _files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(files: dict[str, bytes], descriptor: dict[str, object]) -> bytes:
    """The blob a descriptor names, checked against the descriptor's digest and size."""
    digest = str(descriptor["digest"])
    data = files["blobs/sha256/" + digest.removeprefix("sha256:")]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    assert len(data) == descriptor["size"]
    return data


def _layer_files(files: dict[str, bytes], descriptor: dict[str, object]) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(_blob(files, descriptor)))) as lt:
        return {m.name: lt.extractfile(m).read() for m in lt.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _variants(base: Path, mtime: int, reverse: bool) -> dict[str, list[Path]]:
    """Two platforms' roots of two layers each, as make image's: a base root and the application, every
    file naming its platform."""
    out: dict[str, list[Path]] = {}
    for arch in ("amd64", "arm64"):
        roots = []
        for layer in ("base", "app"):
            root = base / arch / layer
            _tree(root, mtime=mtime, build_uid=1000, reverse=reverse)
            (root / "opt" / "b" / "f").write_text(f"{arch} {layer}")
            os.utime(root / "opt" / "b" / "f", (mtime, mtime))
            roots.append(root)
        out[f"linux/{arch}"] = roots
    return out


def _build_index(tmp: Path, variants: dict[str, list[Path]], *extra: str) -> tuple[list[str], bytes]:
    out = tmp / "index.tar"
    argv = [sys.executable, str(OCI), str(out), *COMMON, *extra]
    for platform, roots in variants.items():
        argv += ["--platform", platform, *(a for r in roots for a in ("--layer", str(r)))]
    r = subprocess.run(argv, capture_output=True, text=True, check=True)
    return r.stdout.split("\n")[:-1], out.read_bytes()


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
    files = _files(data)
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


def test_a_multi_platform_archive_is_one_index_of_a_manifest_per_platform(tmp_path: Path) -> None:
    lines, data = _build_index(tmp_path, _variants(tmp_path / "trees", mtime=5, reverse=False))
    files = _files(data)
    [top] = json.loads(files["index.json"])["manifests"]  # one image under one name, as ctr import names it
    assert top["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert top["annotations"] == {"io.containerd.image.name": "docker.io/library/kube-cgroup-agent:9.9.9",
                                  "org.opencontainers.image.ref.name": "9.9.9"}
    assert lines[0] == top["digest"]
    index = json.loads(_blob(files, top))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json" and index["schemaVersion"] == 2
    assert [m["platform"] for m in index["manifests"]] == [{"architecture": "amd64", "os": "linux"},
                                                           {"architecture": "arm64", "os": "linux"}]
    assert lines[1:] == [f"linux/{m['platform']['architecture']} {m['digest']}" for m in index["manifests"]]
    seen = {"index.json", "manifest.json", "oci-layout", "blobs/sha256/" + top["digest"].split(":")[1]}
    for entry in index["manifests"]:
        arch = entry["platform"]["architecture"]
        assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        manifest = json.loads(_blob(files, entry))
        config = json.loads(_blob(files, manifest["config"]))
        assert (config["architecture"], config["os"]) == (arch, "linux")
        assert config["config"]["Entrypoint"] == ["/usr/bin/python3", "-m", "agent"]
        assert manifest["annotations"] == {"org.opencontainers.image.version": "9.9.9"}
        layers = [_layer_files(files, layer) for layer in manifest["layers"]]
        assert [lf["opt/b/f"] for lf in layers] == [f"{arch} base".encode(), f"{arch} app".encode()]
        assert config["rootfs"]["diff_ids"] == [
            "sha256:" + hashlib.sha256(gzip.decompress(_blob(files, layer))).hexdigest() for layer in manifest["layers"]]
        seen |= {"blobs/sha256/" + d["digest"].split(":")[1] for d in [entry, manifest["config"], *manifest["layers"]]}
    assert seen == set(files)  # every blob is reachable from the index, and nothing else is in the archive
    [docker] = json.loads(files["manifest.json"])  # docker load's single-platform format: the first platform
    amd64 = json.loads(_blob(files, index["manifests"][0]))
    assert docker["Config"] == "blobs/sha256/" + amd64["config"]["digest"].split(":")[1]
    assert docker["Layers"] == ["blobs/sha256/" + layer["digest"].split(":")[1] for layer in amd64["layers"]]
    assert docker["RepoTags"] == ["kube-cgroup-agent:9.9.9"]


def test_two_multi_platform_builds_are_byte_identical_whatever_the_trees_times_and_the_processes(tmp_path: Path) -> None:
    (l1, b1) = _build_index(tmp_path, _variants(tmp_path / "one", mtime=1_000, reverse=False), "--jobs", "1")
    (l2, b2) = _build_index(tmp_path, _variants(tmp_path / "two", mtime=2_000_000, reverse=True), "--jobs", "4")
    assert l1 == l2 and b1 == b2


def test_identical_layers_of_two_platforms_are_stored_once(tmp_path: Path) -> None:
    tree = tmp_path / "same" / "root"
    _tree(tree, mtime=5, build_uid=0, reverse=False)
    lines, data = _build_index(tmp_path, {"linux/amd64": [tree], "linux/arm64": [tree]})
    files = _files(data)
    index = json.loads(_blob(files, json.loads(files["index.json"])["manifests"][0]))
    layers = [json.loads(_blob(files, m))["layers"] for m in index["manifests"]]
    assert layers[0] == layers[1]
    assert len([n for n in files if n.startswith("blobs/")]) == 1 + 2 * 2 + 1  # index, 2 manifests + configs, 1 layer
    assert len(set(lines[1:])) == 2  # the configs differ by architecture, so the manifests do


@pytest.mark.parametrize("argv, error", [
    (["--platform", "amd64"], "expected OS/ARCHITECTURE"),
    (["--platform", "linux/amd64", "--layer", "x", "--platform", "linux/amd64", "--layer", "y"], "given twice"),
    (["--layer", "x", "--platform", "linux/arm64", "--layer", "y"], "after a --layer of no platform"),
    (["--platform", "linux/amd64", "--layer", "x", "--platform", "linux/arm64"], "at least one --layer"),
])
def test_platform_options_that_make_no_sense_are_refused(tmp_path: Path, argv: list[str], error: str) -> None:
    r = subprocess.run([sys.executable, str(OCI), str(tmp_path / "x.tar"), *COMMON, *argv], capture_output=True, text=True)
    assert r.returncode != 0 and error in r.stderr
    assert not (tmp_path / "x.tar").exists()
