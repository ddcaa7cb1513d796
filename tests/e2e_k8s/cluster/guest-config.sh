# shellcheck shell=bash
# The guest node's identity and configuration: its client certificates signed by the cluster's CA,
# kubeconfigs, kubelet and kube-proxy config. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V,
# NODE1, ...) it uses.

sign() {  # name subject: a client certificate signed by the cluster's CA, into $V/share/node/pki
  local d=$V/share/node/pki
  openssl req -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.csr" -subj "$2" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' > "$d/$1.ext"
  openssl x509 -req -in "$d/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -CAserial "$d/ca.srl" \
    -out "$d/$1.crt" -days 3650 -extfile "$d/$1.ext" 2>/dev/null
  rm -f "$d/$1.csr" "$d/$1.ext"
}

guest_node_config() {  # certificates, kubeconfigs, kubelet and kube-proxy config; pki/ready lets setup.sh go on
  local n=$V/share/node host_ip=$1
  sign kubelet "/O=system:nodes/CN=system:node:$NODE2"
  cp "$P/ca.crt" "$P/kube-proxy.crt" "$P/kube-proxy.key" "$n/pki/"
  rm -f "$n/pki/ca.srl"
  for who in kubelet kube-proxy; do
    cat > "$n/$who.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: realk8s, cluster: {server: "https://$host_ip:6443", certificate-authority: /etc/kubernetes/pki/ca.crt}}]
users: [{name: u, user: {client-certificate: /etc/kubernetes/pki/$who.crt, client-key: /etc/kubernetes/pki/$who.key}}]
contexts: [{name: realk8s, context: {cluster: realk8s, user: u}}]
current-context: realk8s
EOF
  done
  # as start.sh's node, but cgroup v2 with the systemd driver: no cgroupRoot (kubepods.slice), failCgroupV1 left
  # at its default; the same QoS-reserved, reserved, enforceNodeAllocatable and feature gates
  cat > "$n/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failSwapOn: false
address: $GUEST_IP
readOnlyPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}}
authorization: {mode: AlwaysAllow}
featureGates: {QOSReserved: true}
qosReserved: {memory: "50%"}
kubeReserved: {cpu: 50m, memory: 256Mi}
systemReserved: {cpu: 50m, memory: 256Mi}
enforceNodeAllocatable: [pods]
evictionHard: {memory.available: 100Mi}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
EOF
  cat > "$n/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: /etc/kubernetes/kube-proxy.kubeconfig}
hostnameOverride: $NODE2
mode: iptables
clusterCIDR: 10.244.0.0/16
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF
  date +%s > "$n/pki/ready.tmp" && mv "$n/pki/ready.tmp" "$n/pki/ready"
}
