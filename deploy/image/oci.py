"""Write an OCI image archive from root directories, byte for byte reproducible, with no daemon or registry.

    python3 deploy/image/oci.py OUT.tar --layer ROOT1 --layer ROOT2 --tag NAME:TAG --epoch SECONDS \
        --label KEY=VALUE ... --env KEY=VALUE ... --entrypoint JSON --user UID

Each layer is a tar of one directory tree (sorted names, every mtime = --epoch, uid/gid 0 unless the file
says otherwise below 1000 or is root:nonroot, no user/group names, PAX-free ustar/GNU headers as Python
writes them), gzip with a zero timestamp. The archive holds the OCI layout (`oci-layout`, `index.json`, `blobs/sha256/...`) and the
`manifest.json` that `docker load` reads, so `ctr images import`, `docker load` and `podman load` take it.
Same inputs, same bytes, same digest.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import time
from pathlib import Path

NONROOT = 65532  # the image's `nonroot` group, kept on the state directory (deploy/image/build.sh)


def _layer_tar(root: Path, epoch: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            rel_dir = Path(dirpath).relative_to(root)
            names = sorted([*dirnames, *filenames])
            if rel_dir != Path():
                _add(tar, root, rel_dir, epoch)
            for name in names:
                full = Path(dirpath) / name
                if name in dirnames and not full.is_symlink():
                    continue  # added when walked into
                _add(tar, root, rel_dir / name, epoch)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, root: Path, rel: Path, epoch: int) -> None:
    full = root / rel
    info = tar.gettarinfo(str(full), arcname=str(rel))
    info.mtime = epoch
    info.uname = info.gname = ""
    if (info.uid, info.gid) != (0, NONROOT) and (info.uid >= 1000 or info.gid >= 1000):
        info.uid = info.gid = 0  # files made by the build user: root's in the image
    info.mode = stat.S_IMODE(os.lstat(full).st_mode)
    if info.isreg():
        with full.open("rb") as f:
            tar.addfile(info, f)
    else:
        tar.addfile(info)


def _gzip(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return out.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def _qualified(tag: str) -> str:
    """The name containerd resolves a short image reference to (docker.io/library/NAME:TAG), so a pod's
    `image: kube-cgroup-agent:0.2.0` finds the imported image."""
    first = tag.split("/", 1)[0]
    if "/" not in tag:
        return f"docker.io/library/{tag}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{tag}"
    return tag


def build(args: argparse.Namespace) -> str:
    blobs: dict[str, bytes] = {}
    layers = []
    diff_ids = []
    for root in args.layer:
        raw = _layer_tar(Path(root), args.epoch)
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        gz = _gzip(raw)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _blob(blobs, gz), "size": len(gz)})
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.epoch))
    labels = dict(kv.split("=", 1) for kv in args.label)
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": list(args.env),
            "Entrypoint": json.loads(args.entrypoint),
            "User": args.user,
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": created, "created_by": f"deploy/image/oci.py layer {Path(r).name}"} for r in args.layer],
    }
    cfg_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    cfg_digest = _blob(blobs, cfg_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": len(cfg_bytes)},
        "layers": layers,
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")},
    }
    man_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    man_digest = _blob(blobs, man_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": man_digest,
                "size": len(man_bytes),
                "annotations": {"io.containerd.image.name": _qualified(args.tag), "org.opencontainers.image.ref.name": args.tag.rsplit(":", 1)[-1]},
            }
        ],
    }
    docker_manifest = [
        {
            "Config": "blobs/sha256/" + cfg_digest.split(":")[1],
            "RepoTags": [args.tag],
            "Layers": ["blobs/sha256/" + layer["digest"].split(":")[1] for layer in layers],
        }
    ]
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
        "manifest.json": json.dumps(docker_manifest, sort_keys=True, separators=(",", ":")).encode(),
        **{f"blobs/sha256/{d.split(':')[1]}": b for d, b in sorted(blobs.items())},
    }
    with tarfile.open(args.out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, args.epoch
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, args.epoch
            tar.addfile(info, io.BytesIO(data))
    return man_digest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--layer", action="append", required=True)
    p.add_argument("--tag", required=True)
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--user", default="0")
    args = p.parse_args()
    print(build(args))


if __name__ == "__main__":
    main()
