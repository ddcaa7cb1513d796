"""The objects of the harness's cluster as plain manifests (pure: no I/O, no clock, deterministic): a
simulated node as a kubelet registers it, pods bound to it with a status as a kubelet reports it, their
workloads (Deployments, ReplicaSets, StatefulSets, DaemonSets), VPAs and their recommendations,
LimitRanges. bench/scale/scenario.py puts them together."""

from __future__ import annotations

import hashlib
from typing import Any

VPA_OPT_IN = "kube-cgroup-agent.io/vpa-actuator"
POLICY = "kube-cgroup-agent.io/pod-update-policy"
LABEL = "kcg-scale"  # on every object the harness makes (value: own | elsewhere)
KUBELET_VERSION = "v1.36.2"
PODS_PER_NODE = 110
OWN_DEPLOYMENTS = 5  # per agent node: 18 pods each; the first four opted in to VPA in place
OWN_DEPLOYMENT_PODS = 18
OWN_STS_PODS = 10
OWN_BARE_PODS = PODS_PER_NODE - OWN_DEPLOYMENTS * OWN_DEPLOYMENT_PODS - OWN_STS_PODS - 2  # the DaemonSet's, the agent's
AGENT_NS = "kube-cgroup-agent"
NODE_RECOMMENDER = "kube-cgroup-agent"  # spec.recommenders[].name of a VPA the agents' recommender serves
UPSTREAM_RECOMMENDER = "default"  # VPA's own recommender's --recommender-name
OWN_RESOURCES = {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def uid(*parts: object) -> str:
    h = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def short_hash(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:10]


def meta(name: str, namespace: str | None, kind: str, **extra: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "labels": {LABEL: kind}}
    if namespace is not None:
        m["namespace"] = namespace
    for k, v in extra.items():
        if k == "labels":
            m["labels"] = {**m["labels"], **v}
        else:
            m[k] = v
    return m


def namespace(name: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(name, None, kind)}


def service_account(ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}


def node(name: str, agent: bool, cpu: int = 16, memory_gi: int = 64) -> dict[str, Any]:
    """A Node as a kubelet v1.36 registers it (its status is written separately: see node_status)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, None, "own" if agent else "elsewhere", labels={
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "sim.4xlarge"}),
        "spec": {},
        "status": node_status(name, cpu, memory_gi, "2026-01-01T00:00:00Z"),
    }


def node_status(name: str, cpu: int, memory_gi: int, heartbeat: str) -> dict[str, Any]:
    capacity = {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "pods": "110", "ephemeral-storage": "100Gi",
                "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    allocatable = {**capacity, "cpu": f"{cpu * 1000 - 100}m", "memory": f"{memory_gi * 1024 - 612}Mi"}
    conditions = [
        {"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": heartbeat,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
          "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": short_hash("m", name), "systemUUID": uid("sys", name), "bootID": uid("boot", name),
                     "kernelVersion": "6.18.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                     "containerRuntimeVersion": "containerd://1.6.20", "kubeletVersion": KUBELET_VERSION,
                     "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
    }


def lease(node_name: str, renew: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node_name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node_name, "leaseDurationSeconds": 40, "renewTime": renew}}


# ---- pod templates and pods -------------------------------------------------------------------------


def resources(i: int) -> dict[str, Any]:
    """Burstable mostly, some Guaranteed, a few BestEffort (i: the workload's index)."""
    cpu = ("100m", "250m", "500m", "1")[i % 4]
    mem = ("128Mi", "256Mi", "512Mi")[i % 3]
    if i % 7 == 3:
        return {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}
    if i % 11 == 5:
        return {}
    return {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": "2", "memory": "1Gi"}}


def template(app: str, i: int, revision: int = 0, res: dict[str, Any] | None = None) -> dict[str, Any]:
    containers = [{
        "name": "app", "image": f"registry.example/{app}:1.{revision}", "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "env": [{"name": "APP", "value": app}, {"name": "LOG_LEVEL", "value": "info"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "resources": resources(i) if res is None else res,
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10,
                           "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    }]
    if i % 3 == 0:  # a sidecar
        containers.append({"name": "proxy", "image": "registry.example/proxy:2.1", "imagePullPolicy": "IfNotPresent",
                           "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
                           "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"})
    return {
        "metadata": {"labels": {"app": app, "tier": "backend"}, "annotations": {"prometheus.io/scrape": "true"}},
        "spec": {"containers": containers, "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                 "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "securityContext": {},
                 "automountServiceAccountToken": False},
    }


def owner(kind: str, name: str, api: str = "apps/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": "", "controller": True,
            "blockOwnerDeletion": True}


def qos_class(containers: list[dict[str, Any]]) -> str:
    rs = [c.get("resources") or {} for c in containers]
    if all(not r for r in rs):
        return "BestEffort"
    if all(r.get("limits") and r.get("requests") == r.get("limits") for r in rs):
        return "Guaranteed"
    return "Burstable"


def pod(name: str, ns: str, node_name: str, tmpl: dict[str, Any], kind: str,
        owner_ref: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec = {**tmpl["spec"], "nodeName": node_name, "tolerations": [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}
    m = meta(name, ns, kind, labels={**tmpl["metadata"]["labels"], **(labels or {})},
             annotations=dict(tmpl["metadata"]["annotations"]))
    if owner_ref is not None:
        m["ownerReferences"] = [owner_ref]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec}


def pod_status(p: dict[str, Any], started: str, ip: str) -> dict[str, Any]:
    """What a kubelet v1.36 reports for a running pod: phase, conditions, container statuses with their
    IDs, allocated and actual resources, QoS class."""
    containers = p["spec"]["containers"]
    name = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
    statuses = []
    for c in containers:
        res = c.get("resources") or {}
        st: dict[str, Any] = {
            "name": c["name"], "image": c["image"], "imageID": f"{c['image']}@sha256:{short_hash('img', c['image']) * 6}"[:120],
            "containerID": f"containerd://{hashlib.sha256((name + c['name']).encode()).hexdigest()}",
            "ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": started}},
            "lastState": {}, "resources": res,
        }
        if res.get("requests"):
            st["allocatedResources"] = res["requests"]
        statuses.append(st)
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    return {"status": {"phase": "Running", "conditions": conditions, "hostIP": "127.0.0.1",
                       "hostIPs": [{"ip": "127.0.0.1"}], "podIP": ip, "podIPs": [{"ip": ip}], "startTime": started,
                       "containerStatuses": statuses, "qosClass": qos_class(containers)}}


def pod_ip(n: int) -> str:
    return f"10.{64 + (n >> 16) % 64}.{(n >> 8) % 256}.{n % 256}"


# ---- workloads ---------------------------------------------------------------------------------------


def deployment(name: str, ns: str, i: int, kind: str, replicas: int, revision: int,
               res: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta(name, ns, kind, annotations={"deployment.kubernetes.io/revision": str(revision)}),
            "spec": {"replicas": replicas, "revisionHistoryLimit": 10, "selector": {"matchLabels": {"app": name}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                     "template": template(name, i, revision, res)},
            "status": {}}


def replicaset(deploy: str, ns: str, i: int, kind: str, revision: int, replicas: int,
               res: dict[str, Any] | None = None) -> dict[str, Any]:
    h = short_hash(deploy, ns, revision)
    tmpl = template(deploy, i, revision, res)
    tmpl["metadata"]["labels"]["pod-template-hash"] = h
    m = meta(f"{deploy}-{h}", ns, kind, labels={"app": deploy, "pod-template-hash": h},
             annotations={"deployment.kubernetes.io/revision": str(revision),
                          "deployment.kubernetes.io/desired-replicas": str(replicas),
                          "deployment.kubernetes.io/max-replicas": str(replicas + 1)},
             ownerReferences=[owner("Deployment", deploy)])
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": m,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": deploy, "pod-template-hash": h}},
                     "template": tmpl}}


def statefulset(name: str, ns: str, i: int, kind: str, replicas: int, opted_in: bool,
                res: dict[str, Any] | None = None) -> dict[str, Any]:
    ann = {POLICY: "InPlaceIfPossible"} if opted_in else {}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(name, ns, kind, annotations=ann),
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "podManagementPolicy": "OrderedReady",
                     "updateStrategy": {"type": "OnDelete"} if opted_in else {"type": "RollingUpdate"},
                     "template": template(name, i, 0, res)}}


def daemonset(name: str, ns: str, i: int, kind: str, opted_in: bool) -> dict[str, Any]:
    ann = {POLICY: "InPlaceIfPossible"} if opted_in else {}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(name, ns, kind, annotations=ann),
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template(name, i),
                     "updateStrategy": {"type": "OnDelete"} if opted_in else {"type": "RollingUpdate"}}}


def vpa(name: str, ns: str, target_kind: str, target: str, kind: str, opted_in: bool,
        recommender: str | None = None) -> dict[str, Any]:
    """A VPA; `recommender`: the one its spec.recommenders names (None: none named, VPA's own serves it)."""
    ann = {VPA_OPT_IN: "node"} if opted_in else {}
    spec: dict[str, Any] = {
        "targetRef": {"apiVersion": "apps/v1", "kind": target_kind, "name": target},
        "updatePolicy": {"updateMode": "InPlace" if opted_in else "Recreate"},
        "resourcePolicy": {"containerPolicies": [{"containerName": "*", "minAllowed": {"cpu": "10m", "memory": "32Mi"},
                                                  "maxAllowed": {"cpu": "4", "memory": "8Gi"}}]}}
    if recommender is not None:
        spec["recommenders"] = [{"name": recommender}]
    return {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": meta(name, ns, kind, annotations=ann), "spec": spec}


def upstream_recommends(obj: dict[str, Any]) -> bool:
    """Whether VPA's own recommender writes this VPA's status: it names no recommender, or names VPA's
    (a VPA naming only others, kube-cgroup-agent's among them, is skipped by it)."""
    recs = (obj.get("spec") or {}).get("recommenders") or []
    return not recs or any(isinstance(r, dict) and r.get("name") == UPSTREAM_RECOMMENDER for r in recs)


def vpa_status(containers: tuple[str, ...], cpu_milli: int, memory_mi: int, at: str) -> dict[str, Any]:
    """A recommendation as VPA's recommender writes it (target with lower and upper bounds)."""
    recs = [{"containerName": c, "target": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"},
             "lowerBound": {"cpu": f"{max(1, cpu_milli * 8 // 10)}m", "memory": f"{max(1, memory_mi * 8 // 10)}Mi"},
             "upperBound": {"cpu": f"{cpu_milli * 13 // 10}m", "memory": f"{memory_mi * 13 // 10}Mi"},
             "uncappedTarget": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"}} for c in containers]
    return {"status": {"recommendation": {"containerRecommendations": recs},
                       "conditions": [{"type": "RecommendationProvided", "status": "True", "lastTransitionTime": at}]}}


def limitrange(ns: str, kind: str, max_cpu: str = "4") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": meta("limits", ns, kind),
            "spec": {"limits": [{"type": "Container", "max": {"cpu": max_cpu, "memory": "8Gi"},
                                 "min": {"cpu": "10m", "memory": "16Mi"},
                                 "default": {"cpu": "500m", "memory": "512Mi"},
                                 "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]}}


def containers_of(tmpl: dict[str, Any]) -> tuple[str, ...]:
    return tuple(c["name"] for c in tmpl["spec"]["containers"])


def own_recommendation(containers: tuple[str, ...], app_cpu_milli: int) -> dict[str, Any]:
    """A recommendation for an agent node's own VPA: the app container's CPU at `app_cpu_milli` (200 is
    its request: nothing to do), every other container at its request; bounds ±20/30 % of the target."""
    recs = []
    for c in containers:
        cpu, mem = (app_cpu_milli, 256) if c == "app" else (50, 64)
        recs.append({"containerName": c, "target": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"},
                     "lowerBound": {"cpu": f"{cpu * 8 // 10}m", "memory": f"{mem * 8 // 10}Mi"},
                     "upperBound": {"cpu": f"{cpu * 13 // 10}m", "memory": f"{mem * 13 // 10}Mi"}})
    return {"status": {"recommendation": {"containerRecommendations": recs}}}
