"""The image `make image` built (dist/kube-cgroup-agent-image.tar, or $KCG_IMAGE_TAR): one OCI index of an
amd64 and an arm64 variant, each variant's binaries built for its architecture, and the arm64 variant's
`kube-cgroup-agent version` run under Debian's qemu-user-static as a container would run it.

Skips without the archive (`make image` builds it), without root (chroot) or without qemu-user-static."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = Path(os.environ.get("KCG_IMAGE_TAR") or ROOT / "dist" / "kube-cgroup-agent-image.tar")
ELF_MACHINE = {"amd64": 62, "arm64": 183}  # EM_X86_64, EM_AARCH64
QEMU = {"arm64": "qemu-aarch64-static", "amd64": "qemu-x86_64-static"}
KERNEL = {"amd64": "x86_64", "arm64": "aarch64"}
SHARED = re.compile(r"\.so(\.\d+)*$")  # a C extension or a library a wheel vendors


def _archive() -> tarfile.TarFile:
    if not ARCHIVE.is_file():
        pytest.skip(f"no {ARCHIVE}: `make image` builds it")
    return tarfile.open(ARCHIVE)


def _json(outer: tarfile.TarFile, digest: str) -> Any:
    blob = outer.extractfile("blobs/sha256/" + digest.split(":")[1])
    assert blob is not None
    return json.load(blob)


def _variants(outer: tarfile.TarFile) -> dict[str, dict[str, Any]]:
    """architecture -> its manifest; skips an archive of one platform (KCG_IMAGE_ARCHES=amd64)."""
    [top] = _json_file(outer, "index.json")["manifests"]
    if top["mediaType"] != "application/vnd.oci.image.index.v1+json":
        pytest.skip(f"{ARCHIVE} is a single-platform image (built before the amd64 + arm64 index)")
    index = _json(outer, top["digest"])
    return {m["platform"]["architecture"]: _json(outer, m["digest"]) for m in index["manifests"]}


def _json_file(outer: tarfile.TarFile, name: str) -> Any:
    f = outer.extractfile(name)
    assert f is not None
    return json.load(f)


def _layers(outer: tarfile.TarFile, manifest: dict[str, Any]) -> list[tarfile.TarFile]:
    out = []
    for layer in manifest["layers"]:
        blob = outer.extractfile("blobs/sha256/" + layer["digest"].split(":")[1])
        assert blob is not None
        out.append(tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob.read()))))  # noqa: SIM115 (in memory)
    return out


def _elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1  # 64-bit, little-endian
    return int.from_bytes(data[18:20], "little")


def test_the_image_is_one_index_of_an_amd64_and_an_arm64_variant_each_built_for_its_architecture() -> None:
    with _archive() as outer:
        variants = _variants(outer)
        for arch, manifest in variants.items():
            config = _json(outer, manifest["config"]["digest"])
            assert (config["architecture"], config["os"]) == (arch, "linux")
            base, app = _layers(outer, manifest)
            python = base.getmember("usr/bin/python3.11")
            assert _elf_machine(base.extractfile(python).read(64)) == ELF_MACHINE[arch]  # type: ignore[union-attr]
            extensions = [m for m in app.getmembers() if m.isfile() and m.name.startswith("opt/") and SHARED.search(m.name)]
            assert len(extensions) > 5, "the dependencies' C extensions (grpc, pydantic_core, yaml, psutil ...)"
            for member in extensions:
                head = app.extractfile(member).read(64)  # type: ignore[union-attr]
                assert _elf_machine(head) == ELF_MACHINE[arch], f"{arch}: {member.name}"
            names = set(app.getnames())
            assert "opt/kube-cgroup-agent/agent/commands/__pycache__/main.cpython-311.pyc" in names  # compiled at build
            assert "usr/lib/python3.11/__pycache__/os.cpython-311.pyc" in names
    if sorted(variants) != ["amd64", "arm64"]:  # the variants it has are right, but it is not the whole image
        pytest.skip(f"{ARCHIVE} holds {', '.join(sorted(variants))} only (built with KCG_IMAGE_ARCHES)")


def _interpreter(arch: str) -> list[str]:
    """How this machine runs `arch`'s programs in a chroot: [] natively or through binfmt_misc (registered
    with the F flag, the kernel holds the interpreter: what make image sets up), else Debian's static qemu
    copied into the root, which then runs the one program it is given; skips without qemu-user-static."""
    if os.uname().machine == KERNEL[arch]:
        return []
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{KERNEL[arch]}"
    try:
        lines = entry.read_text().splitlines()
    except OSError:
        lines = []
    if "enabled" in lines and any(line.startswith("flags:") and "F" in line for line in lines):
        return []
    qemu = shutil.which(QEMU[arch])
    if qemu is None:
        pytest.skip(f"no {QEMU[arch]} and no binfmt_misc entry for it: Debian's qemu-user-static is not installed "
                    f"(apt-get install qemu-user-static), so this machine cannot run the {arch} variant")
    return [qemu]


@pytest.mark.slow
def test_the_arm64_variant_starts_under_qemu_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("runs the variant's root with chroot (root only)")
    with _archive() as outer:
        variants = _variants(outer)
        if "arm64" not in variants:
            pytest.skip(f"{ARCHIVE} has no arm64 variant (built with KCG_IMAGE_ARCHES={' '.join(sorted(variants))})")
        manifest = variants["arm64"]
        config = _json(outer, manifest["config"]["digest"])["config"]
        qemu = _interpreter("arm64")
        root = tmp_path / "root"
        for layer in _layers(outer, manifest):
            with layer:
                layer.extractall(root, filter="fully_trusted")
    env = dict(e.split("=", 1) for e in config["Env"])
    chroot = [shutil.which("chroot") or "/usr/sbin/chroot", str(root)]
    if qemu:  # one program: the entrypoint's interpreter, named
        shutil.copy2(qemu[0], root / "qemu-static")
        chroot += ["/qemu-static", "/usr/bin/python3"]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*chroot, *argv], env=env, capture_output=True, text=True, timeout=300)

    machine = run(*(["-c"] if qemu else ["/usr/bin/python3", "-c"]), "import platform; print(platform.machine())")
    assert machine.stdout.strip() == "aarch64", machine.stderr
    version = run(*config["Entrypoint"], "version")  # as `kubectl exec POD -- kube-cgroup-agent version` runs it
    assert version.returncode == 0, version.stderr
    expected = f"kube-cgroup-agent {config['Labels']['org.opencontainers.image.version']} "
    assert version.stdout.startswith(expected) and "Python 3.11" in version.stdout, version.stdout
