"""How fast a command starts in the agent's image: `kube-cgroup-agent version` and `diff` on the embedded
sample node, run as `kubectl exec` runs them (a new process in the image's root, nothing cached), with the
image's bytecode and without it (the image as built before its bytecode was compiled: the same root with
every `__pycache__` removed).

    python -m bench.image_start [dist/kube-cgroup-agent-image.tar] [--runs 10]

Root (chroot). Writes bench/results/image_start.json; BENCHMARKS.md's figure reads it. The unpacked root is
a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import provenance

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "image_start.json"
SAMPLE = "/opt/kube-cgroup-agent/agent/commands/samples/node/config.yaml"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": "/opt/kube-cgroup-agent",
       "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/root"}
COMMANDS = {"version": ["/usr/local/bin/kube-cgroup-agent", "version"],
            "diff (sample node)": ["/usr/local/bin/kube-cgroup-agent", "diff", "--config", SAMPLE],
            # what a command reading the API server loads first (diff --all in a pod, the daemon)
            "the API client's imports": ["/usr/bin/python3", "-c", "import agent.commands.main, agent.kube.client, kubernetes.client"]}


ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def unpack(archive: Path, into: Path) -> None:
    """Every layer of the OCI archive's one image, in order, into `into` (no whiteouts in this image); of a
    multi-platform image (make image: amd64 and arm64), the variant of this machine's architecture."""
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))  # type: ignore[arg-type]
        top = index["manifests"][0]
        if top["mediaType"] == "application/vnd.oci.image.index.v1+json":
            platforms = json.load(outer.extractfile(f"blobs/sha256/{top['digest'].split(':')[1]}"))  # type: ignore[arg-type]
            [top] = [m for m in platforms["manifests"] if m["platform"]["architecture"] == ARCH]
        digest = top["digest"].split(":")[1]
        manifest = json.load(outer.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type]
        for layer in manifest["layers"]:
            blob = outer.extractfile(f"blobs/sha256/{layer['digest'].split(':')[1]}")
            assert blob is not None
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob.read()))) as lt:
                lt.extractall(into, filter="fully_trusted")


# Runs the command in a grandchild and reports its peak RSS: Linux keeps a process's peak across exec and a
# forked child starts from its parent's, so the child of this (large) benchmark process would report this
# process's peak, not the command's.
_WRAPPER = """import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, time.perf_counter() - t0)
"""


def run_once(root: Path, argv: list[str]) -> tuple[float, int, int]:
    """Wall seconds, exit code and peak RSS (KiB) of one command in the root."""
    done = subprocess.run([sys.executable, "-S", "-c", _WRAPPER, "chroot", str(root), "env", "-i",
                           *(f"{k}={v}" for k, v in ENV.items()), *argv], capture_output=True, text=True, check=True)
    code, peak, wall = done.stdout.split()
    return float(wall), int(code), int(peak)


def measure(root: Path, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, argv in COMMANDS.items():
        run_once(root, argv)  # the page cache warm, as on a node where the image runs
        walls, rss, codes = [], [], set()
        for _ in range(runs):
            wall, code, peak = run_once(root, argv)
            walls.append(wall)
            rss.append(peak)
            codes.add(code)
        out[name] = {"median_s": round(statistics.median(walls), 3), "max_s": round(max(walls), 3),
                     "peak_rss_mib": round(statistics.median(rss) / 1024, 1), "exit_codes": sorted(codes)}
    return out


def pycache(root: Path) -> int:
    return sum(1 for _ in root.rglob("*.pyc"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archive", nargs="?", type=Path, default=ROOT / "dist" / "kube-cgroup-agent-image.tar")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.image_start: needs root (chroot)")
        return 2
    if not args.archive.exists():
        print(f"bench.image_start: no {args.archive}: make image")
        return 2
    code = provenance.current()
    tmp = Path(tempfile.mkdtemp(prefix="kcg-image-start."))
    try:
        root = tmp / "root"
        unpack(args.archive, root)
        with_bytecode = pycache(root)
        after = measure(root, args.runs)
        for d in [p for p in root.rglob("__pycache__") if p.is_dir()]:
            shutil.rmtree(d)
        before = measure(root, args.runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"commit": code.label, "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python -m bench.image_start " + " ".join(argv or []), "runs": args.runs,
              "pyc_files": with_bytecode, "with_bytecode": after, "without_bytecode": before}
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    for name in COMMANDS:
        a, b = after[name], before[name]
        print(f"{name}: {b['median_s']} s, {b['peak_rss_mib']} MiB without bytecode -> {a['median_s']} s, "
              f"{a['peak_rss_mib']} MiB with it (median of {args.runs}; exit codes {a['exit_codes']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
