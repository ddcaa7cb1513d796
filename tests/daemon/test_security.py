"""What SECURITY.md promises, checked on the real daemon process: no credential in any log line (debug
level included), an owner-only state directory and files, endpoints on localhost by default, no write
outside the owned roots whatever a pod names."""

from __future__ import annotations

import stat

from agent.config.settings import Settings
from tests.daemon.harness import Env, wait_for
from tests.resize.manifests import ctr, manifest

TOKEN = "fake-token"  # the fake API server's kubeconfig bearer token (tests/support/fakeapi/server.py)


def test_no_token_is_ever_logged_and_the_state_is_owner_only(env: Env) -> None:
    env.node.add_pod(manifest("web", [ctr("app", req={"cpu": "250m"}, lim={"cpu": "500m"})]))
    env.publish("web")
    (env.tmp / "state").mkdir(mode=0o755)  # an existing, too open directory is tightened
    daemon = env.daemon(logLevel="debug", recommender={"enabled": True, "sampleInterval": "200ms"})
    daemon.ready()
    wait_for(lambda: daemon.logged("reconcile", pod="default/web"), "web's pass")
    env.cluster.drop_watches()  # a reconnect logs the watch again
    wait_for(lambda: env.cluster.open_watches() >= 1, "the watch to reopen")
    assert daemon.logged("annotations.every_namespace"), "annotationNamespaces unset: the daemon says what that allows"
    assert daemon.terminate() == 0
    text = (env.tmp / "daemon.log").read_text()
    assert "reconcile" in text and TOKEN not in text and "Bearer" not in text and "authorization" not in text.lower()
    state = env.tmp / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    files = [p for p in state.rglob("*") if p.is_file()]
    assert files, "the daemon keeps state"
    assert all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in files), [oct(p.stat().st_mode) for p in files]


def test_endpoints_bind_localhost_unless_configured() -> None:
    s = Settings()
    assert s.metrics_bind_address.startswith("127.0.0.1:") and s.health_bind_address.startswith("127.0.0.1:")


def test_annotations_allowed_nowhere_start_without_the_warning(env: Env) -> None:
    env.node.add_pod(manifest("web", [ctr("app", req={"cpu": "250m"}, lim={"cpu": "500m"})]))
    env.publish("web")
    daemon = env.daemon(annotationNamespaces=[])  # as deploy/daemonset.yaml ships
    daemon.ready()
    wait_for(lambda: daemon.logged("reconcile", pod="default/web"), "web's pass")
    assert daemon.terminate() == 0
    assert not daemon.logged("annotations.every_namespace")
