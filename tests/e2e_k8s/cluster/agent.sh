# shellcheck shell=bash
# The agent on the cluster: the realk8s overlay checked and applied (after the VPA CRDs), its pods Ready on
# each node, and what to print when not. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1,
# ...) it uses.

agent_ready_on() {  # node: a Ready agent pod there
  kc -n kube-cgroup-agent get pods -l app.kubernetes.io/name=kube-cgroup-agent \
    --field-selector "spec.nodeName=$1" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -qx True
}
agents_ready() { agent_ready_on "$NODE1" && agent_ready_on "$NODE2"; }

agent_diagnostics() {
  local pod
  kc -n kube-cgroup-agent get pods -o wide || true
  for pod in $(kc -n kube-cgroup-agent get pods -l app.kubernetes.io/name=kube-cgroup-agent -o name 2>/dev/null); do
    echo "----- $pod: events"
    kc -n kube-cgroup-agent get events --field-selector "involvedObject.name=${pod#pod/}" \
      -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message --no-headers 2>/dev/null | tail -n 15 || true
    echo "----- $pod: log (last 20 lines)"
    kc -n kube-cgroup-agent logs "$pod" --tail 20 2>/dev/null || true
    kc -n kube-cgroup-agent logs "$pod" --previous --tail 20 2>/dev/null | sed 's/^/previous: /' || true
  done
}

agent_install() {
  local overlay=$ROOT/deploy/overlays/realk8s
  # the overlay patches two hostPaths by index in deploy/base: check the names still match
  kc kustomize "$overlay" | python3 -c '
import sys, yaml
want = {"cri-socket": ("/run/kcg-realk8s/containerd.sock", "Socket"), "kubelet-config": ("/run/kcg-realk8s/kubelet-config.yaml", "File")}
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc["kind"] == "DaemonSet":
        got = {v["name"]: (v["hostPath"]["path"], v["hostPath"].get("type")) for v in doc["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
        bad = {k: got.get(k) for k in want if got.get(k) != want[k]}
        sys.exit(f"deploy/overlays/realk8s: volumes {bad} (deploy/base reordered its volumes? fix the patch indexes)" if bad else 0)
sys.exit("deploy/overlays/realk8s renders no DaemonSet")' || die "the realk8s overlay does not render as expected"
  # the VPA project's CRDs first (the tests' VPAs): the agent's VPA component looks for them at start
  kc apply -f "$HERE/vpa-v1-crd.yaml" | sed 's/^/  /'
  kc wait --for condition=established --timeout=60s crd/verticalpodautoscalers.autoscaling.k8s.io >/dev/null
  kc apply -k "$overlay" | sed 's/^/  /'
}
