"""The two-node cluster of tests/e2e_k8s/cluster.sh as the tests see it.

`realk8s-node` is this host (cgroup v1, cgroupfs driver, cgroup root /realk8s); `realk8s-v2` the qemu guest
(cgroup v2, systemd driver, systemd as PID 1). The agent runs on both as the DaemonSet of
deploy/overlays/realk8s; everything about it is read the way an operator reads it: `kubectl exec` into
its pod (the `kube-cgroup-agent` command, its metrics on the pod IP), `kubectl logs`, and a root shell on
the node (`cluster.sh exec`) for the files the kubelet, the runtime and systemd wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = Path(__file__).with_name("cluster.sh")
RK = Path(os.environ.get("KCG_REALK8S", "/var/cache/realk8s"))
KUBECTL = str(RK / "bin" / "kubectl")
V1_NODE = "realk8s-node"
V2_NODE = "realk8s-v2"
NODES = (V1_NODE, V2_NODE)
AGENT_NS = "kube-cgroup-agent"
AGENT_LABEL = "app.kubernetes.io/name=kube-cgroup-agent"
AGENT_CONFIG = "/etc/kube-cgroup-agent/config.yaml"
IMAGE = "docker.io/library/cri-e2e-busybox:1"
T = TypeVar("T")
# every module of the tier runs only on the cluster of make e2e-k8s
needs_cluster = pytest.mark.skipif(
    not os.environ.get("KCG_CLUSTER"), reason="needs the two-node cluster of make e2e-k8s (tests/e2e_k8s/cluster.sh)"
)


def kubectl(*args: str, stdin: str | None = None, timeout: float = 120, ok: Sequence[int] = (0,)) -> str:
    done = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "KUBECONFIG": str(RK / "kubeconfig")})
    if done.returncode not in ok:
        raise AssertionError(f"kubectl {' '.join(args)[:300]}: rc {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 120.0, every_s: float = 0.2) -> T:
    """Poll until `probe` returns something truthy; the deadline only bounds a hang."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(every_s)


def node_exec(node: str, *argv: str, timeout: float = 300) -> str:
    """A command as root on the node (cluster.sh exec): this host directly, the guest over its channel."""
    done = subprocess.run(["bash", str(CLUSTER_SH), "exec", node, "--", *argv], capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{node}: {' '.join(argv)[:200]}: rc {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


_READ_FILES = """
import json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            out[path] = f.read().strip()
    except OSError:
        out[path] = None
print(json.dumps(out))
"""


def read_files(node: str, paths: Iterable[str]) -> dict[str, str | None]:
    """Many files of the node in one round trip (None where a file is missing)."""
    wanted = sorted(set(paths))
    out: dict[str, str | None] = {}
    for i in range(0, len(wanted), 400):  # argv stays far below the kernel's limit
        out.update(json.loads(node_exec(node, "python3", "-c", _READ_FILES, *wanted[i:i + 400])))
    return out


def cgroup_root(node: str) -> str:
    """Where the node's cgroup filesystem is (what the agent's paths are relative to)."""
    return "/sys/fs/cgroup"


@dataclass
class NodeAgent:
    """The agent's DaemonSet pod on one node."""

    node: str

    def pod(self) -> dict[str, Any]:
        pods = json.loads(kubectl("get", "pods", "-n", AGENT_NS, "-l", AGENT_LABEL, "--field-selector",
                                  f"spec.nodeName={self.node}", "-o", "json"))["items"]
        running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if len(running) != 1:
            raise AssertionError(f"{len(running)} agent pods on {self.node}")
        return dict(running[0])

    @property
    def name(self) -> str:
        return str(self.pod()["metadata"]["name"])

    def ready(self) -> bool:
        conditions = self.pod().get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def exec(self, *argv: str, ok: Sequence[int] = (0,), timeout: float = 300) -> str:
        return kubectl("exec", "-n", AGENT_NS, self.name, "-c", "agent", "--", *argv, ok=ok, timeout=timeout)

    def diff(self) -> dict[str, Any]:
        """`kube-cgroup-agent diff --all` in the agent's pod: every value it computes, with what it reads."""
        out = self.exec("kube-cgroup-agent", "diff", "--config", AGENT_CONFIG, "--all", "--output", "json",
                        ok=(0, 1))
        return dict(json.loads(out))

    def scrape(self) -> str:
        code = ("import os, urllib.request; print(urllib.request.urlopen("
                "'http://%s:9812/metrics' % os.environ['POD_IP'], timeout=10).read().decode())")
        return self.exec("python3", "-c", code)

    def counters(self, metric: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in self.scrape().splitlines():
            if line.startswith(metric + "{") or line.startswith(metric + " "):
                labels, value = line.rsplit(" ", 1)
                out[labels] = float(value)
        return out

    def drift(self) -> float:
        """Every value found changed by someone else since the agent started (kube_cgroup_agent_drift_total)."""
        return sum(self.counters("kube_cgroup_agent_drift_total").values())

    def lines(self, since_s: float | None = None) -> list[dict[str, Any]]:
        args = ["logs", "-n", AGENT_NS, self.name, "-c", "agent"]
        if since_s is not None:
            args.append(f"--since={max(1, int(since_s))}s")
        out = []
        for line in kubectl(*args).splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def host_pids(self) -> list[int]:
        """The agent container's processes, as the node numbers them (for kill -9 from the node)."""
        statuses = self.pod()["status"].get("containerStatuses") or []
        cid = next(s["containerID"].partition("://")[2] for s in statuses if s["name"] == "agent")
        script = f"grep -l {cid} /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3 || true"
        return sorted(int(p) for p in node_exec(self.node, "sh", "-c", script).split())


def short(node: str) -> str:
    """"v1" or "v2": the node's cgroup version, for the names of what a test makes on it."""
    return "v2" if node == V2_NODE else "v1"


def agent_ready(node: str) -> bool:
    """The agent on `node` is Ready; False, not an error, while the DaemonSet has no pod there (between a
    pod's deletion and its replacement)."""
    try:
        return NodeAgent(node).ready()
    except AssertionError:
        return False


def normalised(filename: str, value: str | None) -> str | None:
    """A file's value as the kernel means it: v1 reads an unlimited memory limit back as a page-counter
    ceiling, v2 writes `max`; memory limits are kept in whole pages (100M reads back as 99999744)."""
    if value is None:
        return None
    if filename.startswith(("memory.", "hugetlb.")) and value not in ("max", "-1"):
        number = int(value)
        if number >= 9223372036854771712 - (1 << 21):
            return "max"
        return str(number - number % 4096) if filename.startswith("memory.") else str(number)
    if value == "-1" and filename.startswith(("memory.", "hugetlb.")):
        return "max"
    return value


@dataclass(frozen=True)
class Disagreement:
    path: str
    node_value: str | None
    agent_desired: str
    agent_read: str | None

    def __str__(self) -> str:
        return f"{self.path}: node {self.node_value!r}, agent computes {self.agent_desired!r} (and read {self.agent_read!r})"


@dataclass(frozen=True)
class Comparison:
    compared: int
    pods: int
    disagreements: tuple[Disagreement, ...]


def compare(node: str, diff: Mapping[str, Any], only_pods: Iterable[str] | None = None) -> Comparison:
    """Each value `diff --all` computes against the file the node holds, read independently as root on the
    node. `only_pods` (pod UIDs) limits pod and container values to those pods; the tiers always count."""
    uids = set(only_pods) if only_pods is not None else None

    def wanted(path: str) -> bool:
        uid = pod_uid(path)
        return uid is None or uids is None or uid in uids

    entries: list[tuple[str, str, str | None, tuple[str, ...]]] = []
    for c in diff["cgroups"]:  # under the systemd driver a CPU limit's exact quota is accepted too
        if wanted(c["path"]):
            entries.append((c["path"], c["desired"], c["current"], tuple(c.get("accept") or ())))
    for c in diff["containers"]:
        if wanted(c["path"]):
            entries.append((c["path"], c["desired"], c["current"], tuple(c.get("accept") or ())))
    base = cgroup_root(node)
    files = read_files(node, (f"{base}/{path}" for path, *_ in entries))
    bad: list[Disagreement] = []
    pods: set[str] = set()
    for path, desired, agent_read, accept in entries:
        filename = path.rsplit("/", 1)[-1]
        held = normalised(filename, files[f"{base}/{path}"])
        ok = held is not None and held in {normalised(filename, v) for v in (desired, *accept)}
        # the agent's pod reads the same file through its own mounts
        ok = ok and normalised(filename, agent_read) == held
        if (uid := pod_uid(path)) is not None:
            pods.add(uid)
        if not ok:
            bad.append(Disagreement(path, held, desired, agent_read))
    return Comparison(len(entries), len(pods), tuple(bad))


_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def pod_uid(path: str) -> str | None:
    """The pod UID a cgroup path names (cgroupfs `pod<uid>` or systemd `pod<uid_with_underscores>`)."""
    m = _POD_UID.search(path)
    return m.group(1).replace("_", "-") if m else None


_SPAN = re.compile(r"(\d+(?:\.\d+)?)(us|ms|min|s|h)")
_SPAN_US = {"us": 1, "ms": 1000, "s": 1_000_000, "min": 60_000_000, "h": 3_600_000_000}


def timespan_us(text: str) -> int | None:
    """systemd's printed time span ("200ms", "1.500s", "1s 500ms") in µs; None for infinity."""
    if text in ("infinity", ""):
        return None
    return round(sum(float(n) * _SPAN_US[u] for n, u in _SPAN.findall(text)))


def unit_properties(node: str, units: Sequence[str]) -> dict[str, dict[str, str]]:
    """CPUWeight, CPUQuotaPerSecUSec, MemoryMax of each unit, as systemd holds them."""
    out: dict[str, dict[str, str]] = {}
    for i in range(0, len(units), 100):
        text = node_exec(node, "systemctl", "show", "-p", "Id", "-p", "CPUWeight", "-p", "CPUQuotaPerSecUSec",
                         "-p", "MemoryMax", *units[i:i + 100])
        for block in text.strip().split("\n\n"):
            props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            out[props["Id"]] = props
    return out


def _sent_per_sec(quota: int, period: int) -> int:
    """runc's `addCPUQuota`: the quota per CPU second, rounded up to whole 10 ms (written out here on
    purpose: the oracle does not take the agent's model)."""
    per_sec = quota * 1_000_000 // period
    return per_sec if per_sec % 10_000 == 0 else (per_sec // 10_000 + 1) * 10_000


def property_disagreements(node: str, diff: Mapping[str, Any]) -> tuple[int, list[str]]:
    """Each slice's unit properties against its cgroup files (systemd re-applies the properties on a
    daemon-reload: a file value without its property would be lost)."""
    by_dir: dict[str, dict[str, str]] = {}
    for c in diff["cgroups"]:
        directory, _, filename = c["path"].rpartition("/")
        if directory.endswith(".slice") and filename in ("cpu.weight", "cpu.max", "memory.max"):
            by_dir.setdefault(directory, {})[filename] = c["desired"]
    base = cgroup_root(node)
    files = read_files(node, (f"{base}/{d}/{f}" for d, fs in by_dir.items() for f in fs))
    props = unit_properties(node, [d.rsplit("/", 1)[-1] for d in by_dir])
    compared, bad = 0, []
    for directory, names in sorted(by_dir.items()):
        unit = directory.rsplit("/", 1)[-1]
        p = props.get(unit, {})
        for filename in names:
            held = files[f"{base}/{directory}/{filename}"]
            if held is None:
                continue
            compared += 1
            if filename == "cpu.weight":
                ok = p.get("CPUWeight") == held
            elif filename == "cpu.max":
                quota, period = held.split()
                per_sec = timespan_us(p.get("CPUQuotaPerSecUSec", ""))
                # the writer sent its quota rounded up to 10 ms a second; the file holds that rounded quota,
                # or (a kubelet < 1.34) the exact one until systemd's next re-apply: either rounds to the unit's
                ok = (per_sec is None) if quota == "max" else per_sec == _sent_per_sec(int(quota), int(period))
            else:
                ok = p.get("MemoryMax") == ("infinity" if held == "max" else held)
            if not ok:
                bad.append(f"{unit}: {filename} {held!r} but the unit says "
                           f"{ {k: v for k, v in p.items() if k != 'Id'} }")
    return compared, bad


# what the tests read of a container, per cgroup version: v1 under the kubelet's cgroupRoot /realk8s,
# v2 under the systemd driver's slices (the guest's kubelet has no cgroupRoot)
V1_DIR = "/sys/fs/cgroup/{controller}/realk8s/kubepods/burstable/pod{uid}/{cid}"
V2_DIR = "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{cid}.scope"
FILES = {  # value: (v1 controller, v1 file, v2 file)
    "cpu_quota": ("cpu", "cpu.cfs_quota_us", "cpu.max"),
    "memory_limit": ("memory", "memory.limit_in_bytes", "memory.max"),
    "memory_usage": ("memory", "memory.usage_in_bytes", "memory.current"),
}


def container_path(node: str, pod: str, value: str, namespace: str = "default") -> str | None:
    """The file holding `value` for the pod's first container on its node (None before the runtime reports
    it; a Burstable pod's)."""
    obj = json.loads(kubectl("get", "pod", pod, "-n", namespace, "-o", "json"))
    statuses = obj.get("status", {}).get("containerStatuses") or []
    cid = (statuses[0].get("containerID") or "").partition("://")[2] if statuses else ""
    if not cid:
        return None
    uid = obj["metadata"]["uid"]
    controller, v1_file, v2_file = FILES[value]
    if node == V2_NODE:
        return V2_DIR.format(uid_=uid.replace("-", "_"), cid=cid) + "/" + v2_file
    return V1_DIR.format(controller=controller, uid=uid, cid=cid) + "/" + v1_file


def container_value(node: str, pod: str, value: str, namespace: str = "default") -> int | None:
    """A container's CPU quota (µs a period, -1 unlimited), memory limit or usage (bytes), from its cgroup file;
    None while the file is not there."""
    path = container_path(node, pod, value, namespace)
    text = read_files(node, [path])[path] if path else None
    if text is None:
        return None
    first = text.split()[0]
    return -1 if first == "max" else int(first)


def vpa_agents(label: str) -> Iterator[dict[str, NodeAgent]]:
    """A module fixture's body: the VPA CRD served and the DaemonSet's agent Ready on each node; afterwards the
    module's Deployments and VPAs (`label`) are deleted."""
    wait_for("the VPA CRD", lambda: "verticalpodautoscalers" in kubectl("api-resources", "--api-group", "autoscaling.k8s.io"), 60)
    found = {node: NodeAgent(node) for node in NODES}
    for node, agent in found.items():
        wait_for(f"the agent Ready on {node}", agent.ready, 300)
    try:
        yield found
    finally:
        kubectl("delete", "deployment,vpa", "-l", label, "--wait=false")
