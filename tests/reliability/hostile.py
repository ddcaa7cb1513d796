"""Hostile input to the CLI, bounded: a YAML alias bomb (9^9 nodes if expanded), one pod of 10,000
containers, a 50 MB manifest. Each runs `kube-cgroup-agent diff` as a child process under an address
space limit (`LIMIT_BYTES`): the answer must be a result (exit 0/1) or one clear line (exit 2), never a
traceback; the figures are its wall time and peak RSS (from the child's rusage)."""

from __future__ import annotations

import itertools
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LIMIT_BYTES = 2 << 30
LEVELS = "abcdefghi"


def alias_bomb() -> str:
    """Nine levels of nine aliases under a valid pod: a loader that expands aliases would build 9^9 nodes."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in itertools.pairwise(LEVELS):
        lines.append(f"{cur}: &{cur} [{','.join([f'*{prev}'] * 9)}]")
    lines += [
        "kind: Pod",
        "apiVersion: v1",
        "metadata: {name: bomb, namespace: default, uid: u-bomb, annotations: {x: *i}}",
        "spec:",
        "  containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]",
        "  nodeSelector: {x: *i}",
        "  volumes: *i",
    ]
    return "\n".join(lines) + "\n"


def many_containers(n: int = 10_000) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big", "namespace": "default", "uid": "u-big"},
        "spec": {"containers": [{"name": f"c{i}", "resources": {"limits": {"cpu": "10m", "memory": "8Mi"}}} for i in range(n)]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": f"c{i}", "containerID": "containerd://" + format(i, "064x"), "state": {"running": {}}}
                for i in range(n)
            ],
        },
    }


def big_manifest(megabytes: int = 50) -> dict[str, Any]:
    pad = "x" * 2000
    count = megabytes * 1_000_000 // 2200 + 1
    items = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u-{i}", "annotations": {"pad": pad}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1m"}}}]},
        }
        for i in range(count)
    ]
    return {"kind": "List", "items": items}


def make_inputs(directory: Path, *, short: bool = False) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = {"YAML alias bomb (9^9)": directory / "bomb.yaml"}
    out["YAML alias bomb (9^9)"].write_text(alias_bomb())
    n = 1_000 if short else 10_000
    out[f"{n:,} containers in one pod"] = directory / "many.json"
    out[f"{n:,} containers in one pod"].write_text(json.dumps(many_containers(n)))
    mb = 5 if short else 50
    out[f"{mb} MB manifest"] = directory / "big.json"
    out[f"{mb} MB manifest"].write_text(json.dumps(big_manifest(mb)))
    for controller in ("cpu", "memory"):
        (directory / "cgroupfs" / controller).mkdir(parents=True, exist_ok=True)
    return out


@dataclass(frozen=True)
class Outcome:
    name: str
    megabytes: float
    exit: int
    seconds: float
    max_rss_mb: float
    tracebacks: int
    last_line: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def run_one(name: str, manifest: Path, cgroupfs: Path) -> Outcome:
    argv = [sys.executable, "-m", "agent", "diff", "--pods", str(manifest), "--cgroupfs", str(cgroupfs), "--cgroup-version", "1", "-o", "json"]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_limit)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - start
    lines = [line for line in err.splitlines() if line.strip()]
    return Outcome(
        name,
        round(manifest.stat().st_size / 1e6, 1),
        proc.returncode,
        round(took, 2),
        round(usage.ru_maxrss / 1024, 1),
        err.count("Traceback"),
        lines[-1][:160] if lines else "",
    )


def run_all(directory: Path, *, short: bool = False) -> list[Outcome]:
    inputs = make_inputs(directory, short=short)
    return [run_one(name, path, directory / "cgroupfs") for name, path in inputs.items()]
