"""The real control plane of the kit, on its own: etcd and kube-apiserver (no controllers, no scheduler,
no kubelet), in a state directory and on ports of its own so that it never meets `make e2e-k8s`'s
cluster (ports 6443/2379, /var/cache/realk8s/state). Started and stopped by PID; refuses to start when
one of its ports is taken. The API server writes an audit log (level Metadata for every user but the
harness's admin) from which each agent's requests are counted by verb and resource."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.scale.api import Client, Credentials

KIT = Path(os.environ.get("RK_KIT", "/var/cache/realk8s"))
HOME = Path(os.environ.get("SCALE_RK", "/var/cache/realk8s-scale"))
HOWTO = ("make scale: no kit binaries in {bin} (kube-apiserver): build them once with "
         "`bash tests/e2e_k8s/build_kit.sh GIT_DIR` (docs/development.md, 'A real cluster'), or set RK_KIT")
ADMIN = "scale-admin"

AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["{ADMIN}"]
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/metrics", "/version", "/openapi*"]
  - level: Metadata
"""


@dataclass(frozen=True)
class Ports:
    api: int = int(os.environ.get("SCALE_API_PORT", "6543"))
    etcd: int = int(os.environ.get("SCALE_ETCD_PORT", "2479"))

    @property
    def etcd_peer(self) -> int:
        return self.etcd + 1


def kit_missing() -> str | None:
    """The one-line how-to when the kit's binaries are not there."""
    apiserver = KIT / "bin" / "kube-apiserver"
    if not os.access(apiserver, os.X_OK):
        return HOWTO.format(bin=KIT / "bin")
    if shutil.which("etcd") is None:
        return "make scale: no etcd on PATH (apt-get install etcd-server, as tests/e2e_k8s/build_kit.sh's kit expects)"
    return None


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def taken(ports: list[int]) -> list[int]:
    return [p for p in ports if port_taken(p)]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificates(pki: Path) -> None:
    """One CA, the API server's serving certificate (127.0.0.1), the admin's client certificate
    (system:masters), the service-account signing key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    if (pki / "ca.crt").exists():
        return
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / "ca.key"), "-out",
             str(pki / "ca.crt"), "-days", "30", "-subj", "/CN=scale-ca")

    def sign(name: str, subject: str, ext: str) -> None:
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / f"{name}.key"), "-out",
                 str(pki / f"{name}.csr"), "-subj", subject)
        (pki / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"), "-CAkey",
                 str(pki / "ca.key"), "-CAcreateserial", "-out", str(pki / f"{name}.crt"), "-days", "30",
                 "-extfile", str(pki / f"{name}.ext"))

    sign("apiserver", "/CN=kube-apiserver", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    sign("admin", f"/O=system:masters/CN={ADMIN}", "extendedKeyUsage=clientAuth")
    _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_pid(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`: only a process this harness started."""
    if not alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


@dataclass
class ControlPlane:
    home: Path = HOME
    ports: Ports = field(default_factory=Ports)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.home / "state"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def audit_log(self) -> Path:
        return self.state / "audit.log"

    def credentials(self) -> Credentials:
        return Credentials("127.0.0.1", self.ports.api, self.pki / "ca.crt", self.pki / "admin.crt", self.pki / "admin.key")

    def client(self) -> Client:
        return Client(self.credentials())

    def _launch(self, name: str, argv: list[str]) -> None:
        log = (self.state / "logs" / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (self.state / f"{name}.pid").write_text(str(self.procs[name].pid))

    def start(self) -> None:
        busy = taken([self.ports.api, self.ports.etcd, self.ports.etcd_peer])
        if busy:
            raise RuntimeError(f"ports {busy} are taken: another cluster or an earlier run is up (stop it first)")
        if self.state.exists():
            shutil.rmtree(self.state)
        (self.state / "logs").mkdir(parents=True)
        certificates(self.pki)
        (self.state / "audit-policy.yaml").write_text(AUDIT_POLICY)
        e, p = self.ports.etcd, self.ports.etcd_peer
        self._launch("etcd", [
            "etcd", "--name", "scale", "--data-dir", str(self.state / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{e}", "--advertise-client-urls", f"http://127.0.0.1:{e}",
            "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
            "--initial-cluster", f"scale=http://127.0.0.1:{p}", "--quota-backend-bytes", str(8 << 30)])
        pki = self.pki
        issuer = "https://kubernetes.default.svc.cluster.local"
        self._launch("kube-apiserver", [
            str(KIT / "bin" / "kube-apiserver"), "--etcd-servers", f"http://127.0.0.1:{e}",
            "--bind-address", "127.0.0.1", "--secure-port", str(self.ports.api), "--advertise-address", "127.0.0.1",
            "--client-ca-file", str(pki / "ca.crt"), "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"),
            "--service-account-issuer", issuer, "--api-audiences", issuer,
            "--service-account-key-file", str(pki / "sa.pub"), "--service-account-signing-key-file", str(pki / "sa.key"),
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
            "--allow-privileged=true", "--service-cluster-ip-range", "10.96.0.0/16",
            "--audit-policy-file", str(self.state / "audit-policy.yaml"), "--audit-log-path", str(self.audit_log),
            "--audit-log-format", "json", "--audit-log-maxsize", "0", "--audit-log-mode", "blocking"])
        self.wait_ready(120.0)

    def wait_ready(self, timeout_s: float) -> None:
        client = self.client()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}); see {self.state / 'logs' / (name + '.log')}")
            try:
                if client.text("/readyz") == "ok":
                    return
            except (OSError, RuntimeError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready in {timeout_s:.0f} s; see {self.state / 'logs'}")

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items()}

    def etcd_metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports.etcd}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def stop(self, wipe: bool = True) -> None:
        for name in ("kube-apiserver", "etcd"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop_pid(proc.pid)
                proc.wait(timeout=30)
        if wipe and self.state.exists():
            shutil.rmtree(self.state)
