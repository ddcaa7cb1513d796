#!/usr/bin/env python3
"""Build a tiny OCI image (an image-layout tarball) from the host's static busybox, offline.

    python3 tests/e2e/build_image.py OUT.tar IMAGE_NAME

The same image serves as the sandbox ("pause") image and as the workload image: containerd 1.6 runs a
sandbox with the image's Cmd, and `sleep 1000000` is a fine pause. Everything is deterministic (mtime 0,
uid 0), so the digests only change when /bin/busybox does. `ctr -n k8s.io images import` names the
image after the index's io.containerd.image.name annotation.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "sleep", "cat", "ls", "echo", "ps", "head", "dd", "true", "mkdir", "env", "id", "rm", "sync")


def _info(name: str, **attrs: object) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    for key, value in attrs.items():
        setattr(ti, key, value)
    return ti


def _layer() -> tuple[bytes, bytes]:
    """(uncompressed tar, gzip of it) of the root filesystem."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "root", "var", "run"):
            tf.addfile(_info(d + "/", type=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755))
        data = BUSYBOX.read_bytes()
        tf.addfile(_info("bin/busybox", size=len(data), mode=0o755), io.BytesIO(data))
        for applet in APPLETS:
            tf.addfile(_info("bin/" + applet, type=tarfile.SYMTYPE, linkname="busybox", mode=0o777))
        files = {
            "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
            "etc/group": b"root:x:0:\nnogroup:x:65534:\n",
        }
        for path, content in files.items():
            tf.addfile(_info(path, size=len(content), mode=0o644), io.BytesIO(content))
    tar_bytes = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as g:
        g.write(tar_bytes)
    return tar_bytes, gz.getvalue()


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def build(out: Path, image_name: str) -> str:
    """Write the image-layout tar to `out`; return the manifest digest."""
    tar_bytes, gz_bytes = _layer()
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sleep", "1000000"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(tar_bytes)]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tests/e2e/build_image.py"}],
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(gz_bytes),
                    "size": len(gz_bytes),
                }
            ],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": image_name,
                        "org.opencontainers.image.ref.name": image_name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    )
    with tarfile.open(out, "w") as tf:

        def add(name: str, blob: bytes) -> None:
            tf.addfile(_info(name, size=len(blob), mode=0o644), io.BytesIO(blob))

        tf.addfile(_info("blobs/", type=tarfile.DIRTYPE, mode=0o755))
        tf.addfile(_info("blobs/sha256/", type=tarfile.DIRTYPE, mode=0o755))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for blob in (config, manifest, gz_bytes):
            add("blobs/sha256/" + _digest(blob).split(":", 1)[1], blob)
    return _digest(manifest)


def main() -> None:
    if len(sys.argv) != 3 or ":" not in sys.argv[2]:
        raise SystemExit("usage: build_image.py OUT.tar NAME:TAG")
    if not BUSYBOX.exists():
        raise SystemExit(f"{BUSYBOX} is missing: install busybox-static")
    digest = build(Path(sys.argv[1]), sys.argv[2])
    print(f"{sys.argv[1]}: {sys.argv[2]} manifest {digest}")


if __name__ == "__main__":
    main()
