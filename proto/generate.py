#!/usr/bin/env python3
"""Regenerate the CRI Python stubs in agent/cri/v1/ from proto/runtime/v1/api.proto.

    .venv/bin/python proto/generate.py              # write agent/cri/v1/
    .venv/bin/python proto/generate.py --out DIR    # write elsewhere (the up-to-date test does this)

Uses grpcio-tools' bundled protoc and mypy-protobuf's plugins (both dev dependencies), so the output
depends only on the pinned tool versions. protoc names imports after the proto path
("from runtime.v1 import api_pb2"); they are rewritten to the package the stubs live in, so nothing
outside `agent.cri.v1` (no top-level `runtime` or `api_pb2`) is ever imported.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROTO = Path("runtime/v1/api.proto")  # relative to HERE, the include root
PACKAGE = "agent.cri.v1"
DEFAULT_OUT = REPO / "agent" / "cri" / "v1"
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")
INIT = '''"""Generated CRI stubs (runtime.v1 subset). Do not edit: run `python proto/generate.py`.

Only `agent.cri` may import this package; everything else uses `agent.cri.types`.
"""
'''


def _plugin(name: str) -> str:
    """The mypy-protobuf plugin next to this interpreter (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name} not found: install the dev dependencies (mypy-protobuf)")
    return found


def _fix_imports(text: str) -> str:
    dotted = ".".join(PROTO.with_suffix("").parts[:-1])  # "runtime.v1"
    for old, new in (
        (f"from {dotted} import api_pb2", f"from {PACKAGE} import api_pb2"),
        (f"import {dotted}.api_pb2", f"import {PACKAGE}.api_pb2"),
        (f"{dotted}.api_pb2.", f"{PACKAGE}.api_pb2."),
        (f"'{dotted}.api_pb2'", f"'{PACKAGE}.api_pb2'"),  # the message classes' __module__
    ):
        text = text.replace(old, new)
    return text


def generate(out: Path) -> list[Path]:
    """Write the stubs and __init__.py into `out`; return the written paths."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{HERE}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            str(HERE / PROTO),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in OUTPUTS:
            src = Path(tmp) / PROTO.parent / name
            dst = out / name
            dst.write_text(_fix_imports(src.read_text()))
            written.append(dst)
    init = out / "__init__.py"
    init.write_text(INIT)
    return [*written, init]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args()
    for path in generate(args.out):
        print(path)


if __name__ == "__main__":
    main()
