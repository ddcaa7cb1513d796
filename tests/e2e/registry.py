"""A minimal OCI distribution registry on 127.0.0.1 for `make e2e` (this machine has no network): serves
images made on demand from the host's busybox plus a padding layer of random bytes, so that a pull costs
what pulling that many bytes costs. Only what containerd's resolver and fetcher use: GET /v2/, HEAD/GET
manifests by tag or digest, GET blobs. Each tag is a distinct image (its padding seeded by the tag), so a
tag is never already present."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.e2e.build_image import _info, _layer

MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


class Registry:
    def __init__(self, port: int, padding_bytes: int = 32 << 20) -> None:
        self.port = port
        self.padding = padding_bytes
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}  # "name:tag" and digest -> manifest
        self.lock = threading.Lock()
        base_tar, base_gz = _layer()
        self.base = (_digest(base_tar), _digest(base_gz), base_gz)
        self.blobs[self.base[1]] = base_gz
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Registry:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _image(self, name: str, tag: str) -> bytes:
        with self.lock:
            key = f"{name}:{tag}"
            if key in self.manifests:
                return self.manifests[key]
            pad = random.Random(key).randbytes(self.padding)  # incompressible: the pull moves every byte
            raw = io.BytesIO()
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
                tf.addfile(_info("pad", size=len(pad), mode=0o644), io.BytesIO(pad))
            pad_tar = raw.getvalue()
            pad_gz = gzip.compress(pad_tar, compresslevel=1, mtime=0)
            config = json.dumps({
                "architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/bin"]},
                "rootfs": {"type": "layers", "diff_ids": [self.base[0], _digest(pad_tar)]},
            }).encode()
            manifest = json.dumps({
                "schemaVersion": 2, "mediaType": MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _digest(config), "size": len(config)},
                "layers": [
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": self.base[1], "size": len(self.base[2])},
                    {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _digest(pad_gz), "size": len(pad_gz)},
                ],
            }).encode()
            self.blobs[_digest(config)] = config
            self.blobs[_digest(pad_gz)] = pad_gz
            self.manifests[key] = manifest
            self.manifests[_digest(manifest)] = manifest
            return manifest

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _send(self, code: int, body: bytes, ctype: str, digest: str | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path in ("/v2", "/v2/"):
                    return self._send(200, b"{}", "application/json")
                if "/manifests/" in path:
                    name, _, ref = path[len("/v2/"):].partition("/manifests/")
                    if ref.startswith("sha256:"):
                        with registry.lock:
                            body = registry.manifests.get(ref)
                        if body is None:
                            return self._send(404, b"{}", "application/json")
                    else:
                        body = registry._image(name, ref)
                    return self._send(200, body, MANIFEST, _digest(body))
                if "/blobs/" in path:
                    digest = path.rsplit("/", 1)[1]
                    with registry.lock:
                        blob = registry.blobs.get(digest)
                    if blob is None:
                        return self._send(404, b"{}", "application/json")
                    return self._send(200, blob, "application/octet-stream", digest)
                self._send(404, b"{}", "application/json")

        return Handler


def address() -> str | None:
    """host:port of the registry `make e2e` configured containerd to pull from over plain HTTP."""
    return os.environ.get("CRI_E2E_REGISTRY") or None
