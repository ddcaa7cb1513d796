"""agent.infra.apiserver sends what the kubernetes client's typed calls send (method, path, query string,
Accept, Content-Type, credentials, body) and fails as they fail (the same ApiException subclass, status,
reason and body). Each case makes the typed call and the wrapper's call against one recording HTTP server
on 127.0.0.1 and compares the two requests; the typed classes are imported here, never by the agent."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.infra.apiserver import JSON, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE, APIServer, path
from agent.kube import watch as watch_module
from agent.kube.errors import APIConflict, APINotFound, wrap
from agent.kube.watch import Bookmark, Change, parse_line


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    accept: str | None
    content_type: str | None
    authorization: str | None
    body: Any


class Recorder:
    """Answers every request with `status` and `answer` (a JSON document, or raw lines when `lines`)."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.status = 200
        self.answer: Any = {}
        self.lines: list[str] | None = None
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                recorder.seen.append(Seen(self.command, self.path, self.headers.get("Accept"),
                                          self.headers.get("Content-Type"), self.headers.get("Authorization"),
                                          json.loads(raw) if raw else None))
                data = ("".join(f"{x}\n" for x in recorder.lines) if recorder.lines is not None
                        else json.dumps(recorder.answer)).encode()
                self.send_response(recorder.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def last(self) -> Seen:
        return self.seen[-1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served() -> Iterator[tuple[Recorder, Any]]:
    rec = Recorder()
    cfg = client.Configuration()
    cfg.host = rec.url
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    with client.ApiClient(cfg) as c:
        yield rec, c
    rec.close()


POD_BODY = {"metadata": {"annotations": {"a": "b"}}}
OPS = [{"op": "replace", "path": "/metadata/labels/x", "value": "y"}]
LEASE = {"metadata": {"name": "l:1", "namespace": "ns"}, "spec": {"holderIdentity": "n1"}}
EVENT = {"metadata": {"name": "web-0.1", "namespace": "ns"}, "involvedObject": {"kind": "Pod", "name": "web-0"},
         "reason": "Resized", "message": "m", "type": "Normal", "count": 1}
DELETE = {"preconditions": {"resourceVersion": "7"}}
VPA = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
LIST_KW: dict[str, Any] = {"field_selector": "spec.nodeName=n1", "limit": 500, "_continue": "tok/en=", "_preload_content": False,
                           "_request_timeout": (10, 60)}
WATCH_KW: dict[str, Any] = {"field_selector": "spec.nodeName=n1", "watch": True, "allow_watch_bookmarks": True,
                            "resource_version": "41", "timeout_seconds": 300, "_preload_content": False}

Call = Callable[[Any], Any]

# (what, the typed call on an ApiClient, the same through APIServer)
CASES: list[tuple[str, Call, Call]] = [
    ("list pods of a node, a page", lambda c: client.CoreV1Api(c).list_pod_for_all_namespaces(**LIST_KW),
     lambda c: APIServer(c).lister(path("v1", "pods"))(**LIST_KW)),
    ("watch pods of a node", lambda c: client.CoreV1Api(c).list_pod_for_all_namespaces(**WATCH_KW),
     lambda c: APIServer(c).lister(path("v1", "pods"))(**WATCH_KW)),
    ("list VPAs, preloaded", lambda c: client.CustomObjectsApi(c).list_cluster_custom_object(*VPA, limit=1, _request_timeout=(10, 30)),
     lambda c: APIServer(c).lister(path("autoscaling.k8s.io/v1", "verticalpodautoscalers"))(limit=1, _request_timeout=(10, 30))),
    ("list limitranges", lambda c: client.CoreV1Api(c).list_limit_range_for_all_namespaces(_preload_content=False),
     lambda c: APIServer(c).list(path("v1", "limitranges"))),
    ("list replicasets", lambda c: client.AppsV1Api(c).list_replica_set_for_all_namespaces(_preload_content=False),
     lambda c: APIServer(c).list(path("apps/v1", "replicasets"))),
    ("list custom objects by label", lambda c: client.CustomObjectsApi(c).list_namespaced_custom_object(
        "kube-cgroup-agent.io", "v1alpha1", "ns", "recommendationpartials", label_selector="a=b,c!=d"),
     lambda c: APIServer(c).list(path("kube-cgroup-agent.io/v1alpha1", "recommendationpartials", "ns"), {"labelSelector": "a=b,c!=d"})),
    ("list a namespace's pods by label", lambda c: client.CoreV1Api(c).list_namespaced_pod("ns", label_selector="app=web", _preload_content=False),
     lambda c: APIServer(c).list(path("v1", "pods", "ns"), {"labelSelector": "app=web"})),
    ("list controller revisions", lambda c: client.AppsV1Api(c).list_namespaced_controller_revision("ns", label_selector="app=web", _preload_content=False),
     lambda c: APIServer(c).list(path("apps/v1", "controllerrevisions", "ns"), {"labelSelector": "app=web"})),
    ("read a node", lambda c: client.CoreV1Api(c).read_node("n1", _preload_content=False, _request_timeout=(10, 30)),
     lambda c: APIServer(c).get(path("v1", "nodes", name="n1"), timeout=(10, 30))),
    ("read a pod", lambda c: client.CoreV1Api(c).read_namespaced_pod("web-0", "ns", _preload_content=False),
     lambda c: APIServer(c).get(path("v1", "pods", "ns", "web-0"))),
    ("read a statefulset", lambda c: client.AppsV1Api(c).read_namespaced_stateful_set("web", "ns", _preload_content=False),
     lambda c: APIServer(c).get(path("apps/v1", "statefulsets", "ns", "web"))),
    ("read a daemonset", lambda c: client.AppsV1Api(c).read_namespaced_daemon_set("web", "ns", _preload_content=False),
     lambda c: APIServer(c).get(path("apps/v1", "daemonsets", "ns", "web"))),
    ("read a controller revision", lambda c: client.AppsV1Api(c).read_namespaced_controller_revision("web-1", "ns", _preload_content=False),
     lambda c: APIServer(c).get(path("apps/v1", "controllerrevisions", "ns", "web-1"))),
    ("admissionregistration discovery", lambda c: client.AdmissionregistrationV1Api(c).get_api_resources(_preload_content=False),
     lambda c: APIServer(c).get(path("admissionregistration.k8s.io/v1"))),
    ("patch a pod's status", lambda c: client.CoreV1Api(c).patch_namespaced_pod_status(
        "web-0", "ns", POD_BODY, _content_type=STRATEGIC_MERGE, _preload_content=False),
     lambda c: APIServer(c).patch(path("v1", "pods", "ns", "web-0", "status"), POD_BODY, STRATEGIC_MERGE)),
    ("resize a pod", lambda c: client.CoreV1Api(c).patch_namespaced_pod_resize(
        "web-0", "ns", POD_BODY, _content_type=STRATEGIC_MERGE, _preload_content=False, _request_timeout=(10, 30)),
     lambda c: APIServer(c).patch(path("v1", "pods", "ns", "web-0", "resize"), POD_BODY, STRATEGIC_MERGE, timeout=(10, 30))),
    # no content type given: the typed call of a built-in kind sends an object as a strategic merge patch
    ("patch a statefulset", lambda c: client.AppsV1Api(c).patch_namespaced_stateful_set("web", "ns", POD_BODY, _preload_content=False),
     lambda c: APIServer(c).patch(path("apps/v1", "statefulsets", "ns", "web"), POD_BODY, STRATEGIC_MERGE)),
    ("patch a daemonset", lambda c: client.AppsV1Api(c).patch_namespaced_daemon_set("web", "ns", POD_BODY, _preload_content=False),
     lambda c: APIServer(c).patch(path("apps/v1", "daemonsets", "ns", "web"), POD_BODY, STRATEGIC_MERGE)),
    # ... and a list as a JSON patch
    ("JSON-patch a pod", lambda c: client.CoreV1Api(c).patch_namespaced_pod("web-0", "ns", OPS, _preload_content=False),
     lambda c: APIServer(c).patch(path("v1", "pods", "ns", "web-0"), OPS, JSON_PATCH)),
    ("patch an event", lambda c: client.CoreV1Api(c).patch_namespaced_event(
        "web-0.1", "ns", {"count": 2}, _content_type=STRATEGIC_MERGE, _preload_content=False),
     lambda c: APIServer(c).patch(path("v1", "events", "ns", "web-0.1"), {"count": 2}, STRATEGIC_MERGE)),
    # a custom resource: a JSON merge patch
    ("patch a custom object", lambda c: client.CustomObjectsApi(c).patch_namespaced_custom_object(*VPA[:2], "ns", VPA[2], "api", POD_BODY),
     lambda c: APIServer(c).patch(path("autoscaling.k8s.io/v1", VPA[2], "ns", "api"), POD_BODY, MERGE_PATCH)),
    ("patch a custom object's status", lambda c: client.CustomObjectsApi(c).patch_namespaced_custom_object_status(
        *VPA[:2], "ns", VPA[2], "api", {"status": {}}),
     lambda c: APIServer(c).patch(path("autoscaling.k8s.io/v1", VPA[2], "ns", "api", "status"), {"status": {}}, MERGE_PATCH)),
]
# a body the typed calls send without a Content-Type (the API server reads JSON then); the wrapper names it
WRITES: list[tuple[str, Call, Call]] = [
    ("replace a lease", lambda c: client.CoordinationV1Api(c).replace_namespaced_lease("l:1", "ns", LEASE),
     lambda c: APIServer(c).replace(path("coordination.k8s.io/v1", "leases", "ns", "l:1"), LEASE)),
    ("delete a lease", lambda c: client.CoordinationV1Api(c).delete_namespaced_lease("l:1", "ns", body=DELETE),
     lambda c: APIServer(c).delete(path("coordination.k8s.io/v1", "leases", "ns", "l:1"), DELETE)),
    ("delete a pod with a uid precondition", lambda c: client.CoreV1Api(c).delete_namespaced_pod(
        "web-0", "ns", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="u-1")), _preload_content=False),
     lambda c: APIServer(c).delete(path("v1", "pods", "ns", "web-0"), {"preconditions": {"uid": "u-1"}})),
    ("delete a pod", lambda c: client.CoreV1Api(c).delete_namespaced_pod("web-0", "ns", body=DELETE, _preload_content=False),
     lambda c: APIServer(c).delete(path("v1", "pods", "ns", "web-0"), DELETE)),
    ("create a lease", lambda c: client.CoordinationV1Api(c).create_namespaced_lease("ns", LEASE),
     lambda c: APIServer(c).create(path("coordination.k8s.io/v1", "leases", "ns"), LEASE)),
    ("create a custom object", lambda c: client.CustomObjectsApi(c).create_namespaced_custom_object(*VPA[:2], "ns", VPA[2], LEASE),
     lambda c: APIServer(c).create(path("autoscaling.k8s.io/v1", VPA[2], "ns"), LEASE)),
    ("create an event", lambda c: client.CoreV1Api(c).create_namespaced_event("ns", EVENT, _preload_content=False),
     lambda c: APIServer(c).create(path("v1", "events", "ns"), EVENT)),
]


def _both(served: tuple[Recorder, Any], typed: Call, raw: Call) -> tuple[Seen, Seen]:
    rec, c = served
    typed(c)
    first = rec.last()
    raw(c)
    return first, rec.last()


@pytest.mark.parametrize(("what", "typed", "raw"), CASES, ids=[c[0] for c in CASES])
def test_the_request_is_the_typed_calls(served: tuple[Recorder, Any], what: str, typed: Call, raw: Call) -> None:
    before, after = _both(served, typed, raw)
    assert after == before
    assert after.accept == JSON and after.authorization == "Bearer t0ken"


@pytest.mark.parametrize(("what", "typed", "raw"), WRITES, ids=[c[0] for c in WRITES])
def test_a_body_is_the_typed_calls_with_its_content_type_named(
    served: tuple[Recorder, Any], what: str, typed: Call, raw: Call
) -> None:
    before, after = _both(served, typed, raw)
    assert before.content_type is None and after.content_type == JSON
    assert (after.method, after.path, after.body, after.accept, after.authorization) == (
        before.method, before.path, before.body, before.accept, before.authorization)


def test_query_strings_and_paths_as_the_api_spells_them(served: tuple[Recorder, Any]) -> None:
    rec, c = served
    APIServer(c).lister(path("v1", "pods"))(**WATCH_KW).release_conn()
    assert rec.last().path == ("/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dn1"
                               "&resourceVersion=41&timeoutSeconds=300&watch=true")
    assert path("coordination.k8s.io/v1", "leases", "ns", "l:1") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l%3A1"


def test_reads_and_writes_return_the_parsed_answer(served: tuple[Recorder, Any]) -> None:
    rec, c = served
    rec.answer = {"items": [{"metadata": {"name": "a"}}], "metadata": {"resourceVersion": "9"}}
    api = APIServer(c)
    assert api.list(path("v1", "pods")) == rec.answer
    assert api.patch(path("v1", "pods", "ns", "a"), {}, STRATEGIC_MERGE) == rec.answer
    assert json.loads(api.lister(path("v1", "pods"))(_preload_content=False).data) == rec.answer


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422, 429, 500, 503])
def test_an_error_is_the_typed_calls_api_exception(served: tuple[Recorder, Any], status: int) -> None:
    rec, c = served
    rec.status = status
    rec.answer = {"kind": "Status", "code": status, "reason": "Injected", "message": f"injected {status}"}
    with pytest.raises(ApiException) as typed:
        client.CoreV1Api(c).patch_namespaced_pod_status("p", "ns", {}, _content_type=STRATEGIC_MERGE, _preload_content=False)
    with pytest.raises(ApiException) as raw:
        APIServer(c).patch(path("v1", "pods", "ns", "p", "status"), {}, STRATEGIC_MERGE)
    with pytest.raises(ApiException) as read:
        APIServer(c).get(path("v1", "nodes", name="n1"))
    for err in (raw.value, read.value):
        assert type(err) is type(typed.value)
        assert (err.status, err.reason, err.body) == (typed.value.status, typed.value.reason, typed.value.body)
        assert json.loads(err.body)["message"] == f"injected {status}"


def test_errors_are_classified_as_before(served: tuple[Recorder, Any]) -> None:
    rec, c = served
    for status, kind in ((404, APINotFound), (409, APIConflict)):
        rec.status = status
        with pytest.raises(ApiException) as err:
            APIServer(c).get(path("v1", "nodes", name="n1"))
        assert isinstance(wrap("get node", err.value), kind)


def test_a_watch_stream_reads_line_by_line(served: tuple[Recorder, Any]) -> None:
    rec, c = served
    rec.lines = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "42"}}}),
        "",
        json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "43"}}}),
    ]
    resp = APIServer(c).lister(path("v1", "pods"))(**WATCH_KW)
    try:
        items = [parse_line(line) for line in watch_module._lines(resp)]
    finally:
        resp.release_conn()
    assert items == [Change("ADDED", {"metadata": {"name": "a", "resourceVersion": "42"}}, "42"), None, Bookmark("43")]
