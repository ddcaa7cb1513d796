"""Write an OCI image archive from root directories, byte for byte reproducible, with no daemon or registry.

    python3 deploy/image/oci.py OUT.tar --layer ROOT1 --layer ROOT2 --tag NAME:TAG --epoch SECONDS \
        --label KEY=VALUE ... --env KEY=VALUE ... --entrypoint JSON --user UID

    python3 deploy/image/oci.py OUT.tar --platform linux/amd64 --layer AMD64_ROOT1 --layer AMD64_ROOT2 \
        --platform linux/arm64 --layer ARM64_ROOT1 --layer ARM64_ROOT2 --tag NAME:TAG --epoch SECONDS ...

Each layer is a tar of one directory tree (sorted names, every mtime = --epoch, uid/gid 0 unless the file
says otherwise below 1000 or is root:nonroot, no user/group names, PAX-free ustar/GNU headers as Python
writes them), gzip with a zero timestamp. The archive holds the OCI layout (`oci-layout`, `index.json`, `blobs/sha256/...`) and the
`manifest.json` that `docker load` reads, so `ctr images import`, `docker load` and `podman load` take it.
Same inputs, same bytes, same digest.

Without --platform: one image (amd64), index.json names its manifest, the digest printed is the manifest's.
With --platform (each followed by that variant's --layer options): one image for all of them, as a registry
serves a multi-platform image: index.json names an image index (the digest printed) whose manifests carry
`platform: {architecture, os}`, each with its own config (that architecture) and layers; the lines after
the digest give each platform's manifest digest. `ctr images import` keeps the index under the one name and
unpacks the host's platform; docker's manifest.json (a single-platform format) lists the first platform.
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
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

NONROOT = 65532  # the image's `nonroot` group, kept on the state directory (deploy/image/build.sh)
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


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


def _layer(job: tuple[str, int]) -> tuple[str, bytes]:
    """(diff_id, gzipped tar) of one root: a process of its own, so the layers of two platforms compress on
    two cores at once."""
    raw = _layer_tar(Path(job[0]), job[1])
    return "sha256:" + hashlib.sha256(raw).hexdigest(), _gzip(raw)


def _blob(blobs: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _qualified(tag: str) -> str:
    """The name containerd resolves a short image reference to (docker.io/library/NAME:TAG), so a pod's
    `image: kube-cgroup-agent:0.2.0` finds the imported image."""
    first = tag.split("/", 1)[0]
    if "/" not in tag:
        return f"docker.io/library/{tag}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{tag}"
    return tag


class _Variants(argparse.Action):
    """--platform OS/ARCH starts a variant; each --layer joins the last one started (or the default
    amd64 variant when no --platform came first)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        variants: list[tuple[str | None, list[str]]] = list(namespace.variants)
        namespace.variants = variants
        if option_string == "--platform":
            os_, sep, arch = str(values).partition("/")
            if not sep or not os_ or not arch or "/" in arch:
                parser.error(f"--platform {values}: expected OS/ARCHITECTURE (linux/amd64)")
            if any(p == values for p, _ in variants):
                parser.error(f"--platform {values} given twice")
            if variants and variants[0][0] is None:
                parser.error("--platform after a --layer of no platform")
            variants.append((str(values), []))
        else:
            if not variants:
                variants.append((None, []))
            variants[-1][1].append(str(values))


def _image(blobs: dict[str, bytes], layers: Sequence[tuple[str, bytes]], roots: Sequence[str], arch: str,
           os_: str, args: argparse.Namespace) -> tuple[bytes, str]:
    """One platform's config and manifest into `blobs`: (the manifest's bytes, its config's digest)."""
    descriptors = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _blob(blobs, gz),
                    "size": len(gz)} for _, gz in layers]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.epoch))
    labels = dict(kv.split("=", 1) for kv in args.label)
    config = {
        "created": created,
        "architecture": arch,
        "os": os_,
        "config": {
            "Env": list(args.env),
            "Entrypoint": json.loads(args.entrypoint),
            "User": args.user,
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id for diff_id, _ in layers]},
        "history": [{"created": created, "created_by": f"deploy/image/oci.py layer {Path(r).name}"} for r in roots],
    }
    cfg_bytes = _json(config)
    cfg_digest = _blob(blobs, cfg_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": len(cfg_bytes)},
        "layers": descriptors,
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")},
    }
    return _json(manifest), cfg_digest


def build(args: argparse.Namespace) -> list[str]:
    """Write the archive; the image's digest first, then `OS/ARCH DIGEST` of each platform's manifest
    (multi-platform only)."""
    variants: list[tuple[str | None, list[str]]] = args.variants
    if not variants or any(not roots for _, roots in variants):
        raise SystemExit("oci.py: every image needs at least one --layer")
    jobs = [(root, args.epoch) for _, roots in variants for root in roots]
    workers = max(1, min(len(jobs), args.jobs or os.cpu_count() or 1))
    if workers == 1:
        done = [_layer(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_layer, jobs))  # in order: the archive does not depend on which ends first
    blobs: dict[str, bytes] = {}
    name = {"io.containerd.image.name": _qualified(args.tag), "org.opencontainers.image.ref.name": args.tag.rsplit(":", 1)[-1]}
    images: list[tuple[str | None, bytes, str, list[tuple[str, bytes]]]] = []
    for platform, roots in variants:
        layers, done = done[: len(roots)], done[len(roots):]
        os_, _, arch = (platform or "linux/amd64").partition("/")
        man_bytes, cfg_digest = _image(blobs, layers, roots, arch, os_, args)
        images.append((platform, man_bytes, cfg_digest, layers))
    lines: list[str]
    if variants[0][0] is None:  # one image, as before --platform existed
        [(_, man_bytes, _, _)] = images
        top = {"mediaType": MANIFEST, "digest": _blob(blobs, man_bytes), "size": len(man_bytes), "annotations": name}
        lines = [top["digest"]]
    else:
        manifests = []
        lines = []
        for platform, man_bytes, _, _ in images:
            assert platform is not None
            os_, _, arch = platform.partition("/")
            digest = _blob(blobs, man_bytes)
            manifests.append({"mediaType": MANIFEST, "digest": digest, "size": len(man_bytes),
                              "platform": {"architecture": arch, "os": os_}})
            lines.append(f"{platform} {digest}")
        labels = dict(kv.split("=", 1) for kv in args.label)
        index_bytes = _json({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests,
                             "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")}})
        top = {"mediaType": INDEX, "digest": _blob(blobs, index_bytes), "size": len(index_bytes), "annotations": name}
        lines.insert(0, top["digest"])
    first_cfg, first_layers = images[0][2], images[0][3]
    docker_manifest = [
        {
            "Config": "blobs/sha256/" + first_cfg.split(":")[1],
            "RepoTags": [args.tag],
            "Layers": ["blobs/sha256/" + hashlib.sha256(gz).hexdigest() for _, gz in first_layers],
        }
    ]
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": _json({"schemaVersion": 2, "mediaType": INDEX, "manifests": [top]}),
        "manifest.json": _json(docker_manifest),
        **{f"blobs/sha256/{d.split(':')[1]}": b for d, b in sorted(blobs.items())},
    }
    with tarfile.open(args.out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for dirname in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(dirname)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, args.epoch
            tar.addfile(info)
        for filename, data in files.items():
            info = tarfile.TarInfo(filename)
            info.size, info.mode, info.mtime = len(data), 0o644, args.epoch
            tar.addfile(info, io.BytesIO(data))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--platform", action=_Variants, dest="variants", metavar="OS/ARCH",
                   help="starts a platform's variant: the --layer options after it are its layers")
    p.add_argument("--layer", action=_Variants, dest="variants", metavar="ROOT")
    p.add_argument("--tag", required=True)
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--user", default="0")
    p.add_argument("--jobs", type=int, default=0, help="processes compressing layers (default: one a CPU)")
    p.set_defaults(variants=[])
    args = p.parse_args()
    print("\n".join(build(args)))


if __name__ == "__main__":
    main()
