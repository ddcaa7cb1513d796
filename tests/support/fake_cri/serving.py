"""Running the fake runtime: its servicers on a real gRPC server at a unix socket, for as long as a test
or a benchmark needs it, and the socket path kept within the kernel's limit."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from agent.cri.v1 import api_pb2_grpc as pb_grpc
from tests.support.fake_cri.servicer import FakeImageService, FakeRuntimeService


@dataclass
class FakeCRI:
    """A running fake: `service` holds the state, `endpoint` is what a CRIClient connects to."""

    service: FakeRuntimeService
    endpoint: str
    socket: Path
    server: grpc.Server
    images: FakeImageService


def _socket_path(directory: Path) -> tuple[Path, Path | None]:
    """`<dir>/cri.sock`, or a short private dir when that exceeds the 107-byte sun_path limit."""
    path = directory / "cri.sock"
    if len(str(path)) <= 100:
        return path, None
    short = Path(tempfile.mkdtemp(prefix="cri"))
    return short / "cri.sock", short


@contextmanager
def running_fake_cri(directory: Path, service: FakeRuntimeService | None = None) -> Iterator[FakeCRI]:
    """Serve a FakeRuntimeService on `unix:<directory>/cri.sock` for the duration of the block."""
    service = service or FakeRuntimeService()
    sock, extra_dir = _socket_path(directory)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_RuntimeServiceServicer_to_server(service, server)
    images = FakeImageService(service)
    pb_grpc.add_ImageServiceServicer_to_server(images, server)
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    try:
        yield FakeCRI(service=service, endpoint=f"unix://{sock}", socket=sock, server=server, images=images)
    finally:
        server.stop(grace=None).wait()
        sock.unlink(missing_ok=True)
        if extra_dir is not None:
            extra_dir.rmdir()
