#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the test tier, on 127.0.0.1 only, built from the binaries
# scripts/k8s-build.sh makes (no registry, no release download, no image pull).
#
# Usage: k8s-cluster.sh up       start what is not running, wait until the node is Ready (idempotent;
#                                well under 2 s when already up)
#        k8s-cluster.sh down     delete the pods, stop everything this script started, clean mounts,
#                                network namespaces, the bridge and the cluster's objects (binaries, PKI
#                                and the imported images stay)
#        k8s-cluster.sh status   exit 0 when the API server answers and the node is Ready
#        k8s-cluster.sh env      print `export KUBECONFIG=...` and `export PATH=<bin dir>:$PATH`
#
# What runs (each with its own ports and directories, never a system default that could clash):
#   etcd (23790/23800, TLS with client certificates), kube-apiserver (16443), kube-controller-manager,
#   kube-scheduler, a second containerd (own config/root/state/socket; the Docker engine's containerd is
#   never touched) and a kubelet (16250) naming its node `localhost`.
# State (PKI, kubeconfigs, logs, etcd data, containerd's image store, kubelet root) lives under
# $SANDBOX_STATE_DIR/k8s/cluster; sockets, pid files and runtime state under $SANDBOX_RUN_DIR/k8s.
# Root only: the kubelet and containerd create cgroups, mounts and network namespaces.
# The measured facts behind the settings: /work/shared/KUBERNETES-ON-THIS-MACHINE.md and
# docs/kubernetes-cluster.md.
#
# Environment: SANDBOX_K8S_PLEG  how the kubelet learns that a container started or ended:
#   generic (default)  by relisting every second (the kubelet's default; bookworm's containerd): 0-1 s late
#   evented            from the runtime's container events (alpha feature gate EventedPLEG), with Debian
#                      trixie's containerd 1.7 (bookworm's 1.6 answers "not implemented"), unpacked once
#                      into $SANDBOX_STATE_DIR/k8s/containerd-trixie: an end is reported in ~30 ms. For
#                      benchmarks only: with it a pod stopped by activeDeadlineSeconds was not reported
#                      ended for many seconds (5 deadline tests failed, 2026-11-25), so tests use generic.
#   Switching restarts containerd and the kubelet (their configurations change); running pods end.
set -euo pipefail
SO_LOG_PREFIX=k8s-cluster
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$SCRIPT_DIR")"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

# --- settings ----------------------------------------------------------------------------------------
ETCD_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=16443
KUBELET_PORT=16250
API_SERVER="https://127.0.0.1:$API_PORT"
NODE_NAME=localhost
SERVICE_CIDR=10.254.0.0/24          # no kube-proxy: service addresses are names in the API only
SERVICE_IP=10.254.0.1
# Pods' subnet: the bridge has no address and pods no default route, so the host never routes to it.
POD_SUBNET="${SANDBOX_K8S_POD_SUBNET:-10.253.0.0/24}"
BRIDGE=so-k8s0
# The egress proxy's door onto the pods' network: a namespace of its own on the bridge, holding one address
# and nothing but the listener the controller opens in it (backend.kubernetes.egress.netns). Pods reach it
# on their own subnet; nothing of the host does (pods' addresses stop at .250: .254 is never a pod's).
EGRESS_NETNS=so-k8s-egress
EGRESS_IP="${POD_SUBNET%.*}.254"
EGRESS_LINK=so-k8s-egh        # its bridge end; the namespace's end is so-k8s-egn
POD_RANGE_END="${POD_SUBNET%.*}.250"
CNI_NETWORK=sandbox-orchestrator-k8s
CNI_BIN_DIR=/usr/lib/cni            # Debian's containernetworking-plugins
CGROUP_ROOT=/sandbox-orchestrator-k8s   # every pod cgroup lives below this one (removed by down)
PAUSE_IMAGE="$SO_IMAGE_PREFIX/k8s-pause:latest"
# The images pods may use (imagePullPolicy Never); the controller only when `make image` built it.
SANDBOX_IMAGES=("$SO_BASE_IMAGE" "$(so_sandbox_image minimal)" "$(so_sandbox_image default)")
CONTROLLER_IMAGE="$SO_IMAGE_PREFIX/controller:latest"

CLUSTER_DIR="$SO_STATE_DIR/k8s/cluster"
RUN_DIR="$SO_RUN_DIR/k8s"
PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
ETCD_DATA="$CLUSTER_DIR/etcd"
CTRD_ROOT="$CLUSTER_DIR/containerd"   # the imported images: kept by down
CTRD_STATE="$RUN_DIR/containerd"
CTRD_SOCK="$RUN_DIR/containerd.sock"
CTRD_CONFIG="$CLUSTER_DIR/containerd.toml"
RUNSC_CONFIG="$CLUSTER_DIR/runsc.toml"
CNI_CONF_DIR="$CLUSTER_DIR/cni"
IPAM_DIR="$RUN_DIR/ipam"
KUBELET_ROOT="$CLUSTER_DIR/kubelet"
KUBELET_CONFIG="$CLUSTER_DIR/kubelet.yaml"
SECCOMP_DIR="$KUBELET_ROOT/seccomp/sandbox-orchestrator"
IMAGE_STAMPS="$CLUSTER_DIR/images"
SYSCTL_SAVED="$CLUSTER_DIR/sysctl.saved"
GVISOR_STAMP="$CLUSTER_DIR/gvisor.proven"
GVISOR_REASON="$CLUSTER_DIR/gvisor.unavailable"
ADMIN_KUBECONFIG="$CLUSTER_DIR/admin.kubeconfig"
PLEG="${SANDBOX_K8S_PLEG:-generic}"
case "$PLEG" in generic | evented) ;; *) so_die "SANDBOX_K8S_PLEG must be evented or generic (got '$PLEG')" ;; esac
CTRD_TRIXIE_DIR="$SO_STATE_DIR/k8s/containerd-trixie"
CTRD_BIN=""     # set by ensure_containerd_binary: the containerd the node runs (its runc shim beside it)

# Start order; down stops them in reverse (after deleting the pods).
COMPONENTS=(etcd kube-apiserver containerd kubelet kube-controller-manager kube-scheduler)

BIN_DIR=""      # set by ensure_binaries

# --- small helpers -------------------------------------------------------------------------------------

kc() { "$BIN_DIR/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }
kctr() { ctr --address "$CTRD_SOCK" --namespace k8s.io "$@"; }

# wait_until SECONDS CMD...: runs CMD every 0.2 s until it succeeds; fails after SECONDS.
wait_until() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# die_with_log NAME MESSAGE: the message, then the end of the component's log.
die_with_log() {
    so_warn "$2; the end of $LOGS/$1.log:"
    tail -n 25 "$LOGS/$1.log" 2>/dev/null | sed 's/^/    /' >&2 || true
    exit 1
}

# write_if_changed FILE MODE: stdin becomes FILE unless FILE already has that content; sets CHANGED=1 when
# it wrote (a running component then needs a restart to read it).
CHANGED=0
write_if_changed() {
    local file="$1" mode="$2" tmp
    tmp="$(mktemp "$file.XXXXXX")"
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
    else
        mv -f "$tmp" "$file"
        CHANGED=1
    fi
}

# --- processes -----------------------------------------------------------------------------------------

process_alive() { [ -d "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

# Pid of our running component NAME: its pid file names a live process of that binary whose command line
# carries our cluster directory (a stale pid reused by something else never counts).
component_pid() {
    local name="$1" pid argv0
    [ -r "$RUN_DIR/$name.pid" ] || return 1
    pid="$(tr -dc '0-9' <"$RUN_DIR/$name.pid")"
    [ -n "$pid" ] && process_alive "$pid" || return 1
    argv0="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1)"
    [ "${argv0##*/}" = "$name" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CLUSTER_DIR" || return 1
    printf '%s\n' "$pid"
}

component_running() { component_pid "$1" >/dev/null; }

# Keeps one previous log: a long-lived test machine must not fill its disk with kubelet chatter.
rotate_log() {
    local log="$1"
    if [ -f "$log" ] && [ "$(stat -c %s "$log")" -gt $((20 * 1024 * 1024)) ]; then
        mv -f "$log" "$log.1"
    fi
}

# start_component NAME CMD...: CMD in a session of its own (a Ctrl-C of `make` or pytest does not reach it),
# output to its log; the lock descriptors are closed so a daemon never holds the script's lock.
start_component() {
    local name="$1"; shift
    local log="$LOGS/$name.log"
    rotate_log "$log"
    printf -- '--- %s started by k8s-cluster.sh\n' "$(date -Is)" >>"$log"
    (exec setsid "$@" </dev/null >>"$log" 2>&1 8>&- 9>&-) &
    printf '%s\n' "$!" >"$RUN_DIR/$name.pid"
}

# stop_component NAME [SECONDS [quiet]]: SIGTERM, then SIGKILL after SECONDS (default 10), with a warning
# unless quiet.
stop_component() {
    local name="$1" grace="${2:-10}" quiet="${3:-}" pid i
    if pid="$(component_pid "$name")"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < grace * 10; i++)); do
            process_alive "$pid" || break
            sleep 0.1
        done
        if process_alive "$pid"; then
            [ -n "$quiet" ] || so_warn "$name did not stop in ${grace} s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            wait_until 5 bash -c "! [ -d /proc/$pid ]" || true
        fi
    fi
    rm -f "$RUN_DIR/$name.pid"
}

# --- prerequisites -------------------------------------------------------------------------------------

ensure_binaries() {
    BIN_DIR="$(bash "$SCRIPT_DIR/k8s-build.sh")" || so_die "scripts/k8s-build.sh failed"
}

# The node's containerd: bookworm's (generic PLEG), or trixie's 1.7 for the runtime's container events
# (evented), fetched once without installing it (the Docker engine keeps its own containerd).
ensure_containerd_binary() {
    if [ "$PLEG" = generic ]; then
        CTRD_BIN="$(command -v containerd)" || so_die "containerd not found (make setup installs it)"
        return 0
    fi
    if [ ! -x "$CTRD_TRIXIE_DIR/usr/bin/containerd" ]; then
        local deb version
        SO_TMP="$(mktemp -d "${TMPDIR:-/tmp}/k8s-containerd.XXXXXX")"
        deb="$(so_trixie_download containerd "$SO_TMP")"
        version="$(dpkg-deb -f "$deb" Version)"
        case "$version" in 1.[0-6].*) so_die "trixie's containerd is $version: evented PLEG needs 1.7 or newer" ;; esac
        rm -rf "$CTRD_TRIXIE_DIR.new"
        dpkg-deb -x "$deb" "$CTRD_TRIXIE_DIR.new"
        printf '%s\n' "$version" >"$CTRD_TRIXIE_DIR.new/deb-version"
        rm -rf "$CTRD_TRIXIE_DIR" "$SO_TMP"
        mv "$CTRD_TRIXIE_DIR.new" "$CTRD_TRIXIE_DIR"
        so_say "unpacked containerd $version (Debian trixie) into $CTRD_TRIXIE_DIR"
    fi
    CTRD_BIN="$CTRD_TRIXIE_DIR/usr/bin/containerd"
}

# containerd and runc come with the engine packages (make setup); the CNI plugins are ours to add, and the
# tools this script uses may be missing from a minimal machine.
ensure_packages() {
    local pkgs=()
    command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || pkgs+=(containerd)
    command -v runc >/dev/null 2>&1 || pkgs+=(runc)
    command -v openssl >/dev/null 2>&1 || pkgs+=(openssl)
    command -v ip >/dev/null 2>&1 || pkgs+=(iproute2)
    command -v pgrep >/dev/null 2>&1 || pkgs+=(procps)
    [ -x "$CNI_BIN_DIR/bridge" ] && [ -x "$CNI_BIN_DIR/host-local" ] && [ -x "$CNI_BIN_DIR/loopback" ] \
        || pkgs+=(containernetworking-plugins)
    [ "${#pkgs[@]}" -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || so_die "missing ${pkgs[*]} and no apt-get to install them"
    so_say "apt-get install ${pkgs[*]}"
    # policy-rc.d: no service a package ships (cni-dhcp, containerd) may start on its own.
    local created_policy=0 rc=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# temporary, written by sandbox-orchestrator k8s-cluster.sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    { DEBIAN_FRONTEND=noninteractive apt-get -q update \
        && DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "${pkgs[@]}"; } \
        >"$LOGS/apt.log" 2>&1 || rc=$?
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    if [ "$rc" != 0 ]; then
        tail -n 20 "$LOGS/apt.log" >&2
        so_die "apt-get install ${pkgs[*]} failed"
    fi
}

# --- PKI (openssl; ECDSA P-256 keys: fast to make, accepted by every component) -----------------------

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

# issue NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]: NAME.key and NAME.crt signed by our CA.
issue() {
    local name="$1" subject="$2" eku="$3" sans="${4:-}" ext
    new_key "$PKI/$name.key"
    ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku"
    if [ -n "$sans" ]; then ext="$ext
subjectAltName=$sans"; fi
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 365 -out "$PKI/$name.crt" -extfile <(printf '%s\n' "$ext") 2>/dev/null
    rm -f "$PKI/$name.csr"
}

PKI_CERTS=(etcd etcd-client apiserver apiserver-kubelet-client admin controller-manager scheduler
    kubelet-client kubelet-serving)

pki_valid() {
    local c
    [ -f "$PKI/ca.key" ] && [ -f "$PKI/sa.key" ] && [ -f "$PKI/sa.pub" ] || return 1
    openssl x509 -checkend 86400 -noout -in "$PKI/ca.crt" >/dev/null 2>&1 || return 1
    for c in "${PKI_CERTS[@]}"; do [ -f "$PKI/$c.key" ] && [ -f "$PKI/$c.crt" ] || return 1; done
    # all leaf certificates are issued together: one of them tells their expiry
    openssl x509 -checkend 86400 -noout -in "$PKI/apiserver.crt" >/dev/null 2>&1
}

# A new CA and every certificate, when any is missing or expires within a day. Components running with
# the old ones are stopped first (they would no longer trust each other).
ensure_pki() {
    pki_valid && return 0
    local c
    for c in "${COMPONENTS[@]}"; do stop_component "$c"; done
    so_say "making the cluster's CA and certificates"
    rm -rf "$PKI"
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    new_key "$PKI/ca.key"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sandbox-orchestrator-k8s-ca" -days 3650 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$PKI/ca.crt" 2>/dev/null
    issue etcd "/CN=etcd" serverAuth,clientAuth "IP:127.0.0.1,DNS:localhost"
    issue etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
    issue apiserver "/CN=kube-apiserver" serverAuth \
        "IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    # the API server's identity towards the kubelet (logs, exec): bound to system:kubelet-api-admin
    issue apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" clientAuth
    issue admin "/O=system:masters/CN=sandbox-orchestrator-admin" clientAuth
    issue controller-manager "/CN=system:kube-controller-manager" clientAuth
    issue scheduler "/CN=system:kube-scheduler" clientAuth
    # the Node authorizer and NodeRestriction know the kubelet by this name and group
    issue kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    issue kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,IP:127.0.0.1"
    new_key "$PKI/sa.key"
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    rm -f "$PKI/ca.srl"
}

# write_kubeconfig FILE CERT_NAME: a kubeconfig for the API server with that client certificate inline
# (a copy works anywhere, e.g. mounted into a container).
write_kubeconfig() {
    local file="$1" cert="$2"
    write_if_changed "$file" 600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandbox-orchestrator
  cluster:
    server: $API_SERVER
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: sandbox-orchestrator
  context:
    cluster: sandbox-orchestrator
    user: $cert
current-context: sandbox-orchestrator
EOF
}

ensure_kubeconfigs() {
    write_kubeconfig "$ADMIN_KUBECONFIG" admin
    write_kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" controller-manager
    write_kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" scheduler
    write_kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" kubelet-client
}

# --- etcd and the control plane --------------------------------------------------------------------------

# GET /health over TLS with the API server's etcd client certificate (openssl: no curl on a bare machine).
etcd_healthy() {
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' \
        | timeout 3 openssl s_client -quiet -verify_return_error -connect "127.0.0.1:$ETCD_PORT" -CAfile "$PKI/ca.crt" \
            -cert "$PKI/etcd-client.crt" -key "$PKI/etcd-client.key" 2>/dev/null \
        | grep -q '"health":"true"'
}

ensure_etcd() {
    component_running etcd && return 0
    mkdir -p "$ETCD_DATA"
    chmod 700 "$ETCD_DATA"
    start_component etcd "$BIN_DIR/etcd" --name so-k8s --data-dir "$ETCD_DATA" --log-level warn \
        --listen-client-urls "https://127.0.0.1:$ETCD_PORT" --advertise-client-urls "https://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "https://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "https://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "so-k8s=https://127.0.0.1:$ETCD_PEER_PORT" \
        --cert-file "$PKI/etcd.crt" --key-file "$PKI/etcd.key" --trusted-ca-file "$PKI/ca.crt" --client-cert-auth \
        --peer-cert-file "$PKI/etcd.crt" --peer-key-file "$PKI/etcd.key" \
        --peer-trusted-ca-file "$PKI/ca.crt" --peer-client-cert-auth
    wait_until 30 etcd_healthy || die_with_log etcd "etcd did not become healthy"
}

api_ready() { kc get --raw /readyz --request-timeout=2s >/dev/null 2>&1; }

# --allow-privileged=false: privileged containers are refused in every namespace, before admission.
# --endpoint-reconciler-type=none: no Endpoints for the kubernetes Service, whose only address would be
#   127.0.0.1, which Endpoints refuse (an error every 10 s otherwise; nothing routes to services here).
# --kubelet-preferred-address-types=Hostname: the node is named localhost, so logs/exec reach the kubelet
#   on 127.0.0.1 (the kubelet refuses a loopback node IP); its serving certificate is checked against our CA.
ensure_apiserver() {
    component_running kube-apiserver && return 0
    start_component kube-apiserver "$BIN_DIR/kube-apiserver" \
        --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
        --etcd-servers="https://127.0.0.1:$ETCD_PORT" --etcd-cafile="$PKI/ca.crt" \
        --etcd-certfile="$PKI/etcd-client.crt" --etcd-keyfile="$PKI/etcd-client.key" \
        --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction,PodSecurity \
        --allow-privileged=false --anonymous-auth=false --profiling=false \
        --endpoint-reconciler-type=none \
        --kubelet-preferred-address-types=Hostname --kubelet-certificate-authority="$PKI/ca.crt" \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key"
    wait_until 60 api_ready || die_with_log kube-apiserver "kube-apiserver did not become ready"
}

ensure_controller_manager() {
    component_running kube-controller-manager && return 0
    # --secure-port=0: no metrics/health endpoint to serve (one port less); leader election is for HA only
    start_component kube-controller-manager "$BIN_DIR/kube-controller-manager" \
        --kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" --secure-port=0 --leader-elect=false \
        --use-service-account-credentials=true --service-account-private-key-file="$PKI/sa.key" \
        --root-ca-file="$PKI/ca.crt" --service-cluster-ip-range="$SERVICE_CIDR" --allocate-node-cidrs=false
}

ensure_scheduler() {
    component_running kube-scheduler && return 0
    start_component kube-scheduler "$BIN_DIR/kube-scheduler" \
        --kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" --secure-port=0 --leader-elect=false
}

# --- the node: containerd, CNI, kubelet ----------------------------------------------------------------

# runsc under the gVisor shim: the same flags as the Docker engine's runsc runtime (no network, the OCI
# seccomp profile applied inside the sandbox too).
write_runsc_config() {
    write_if_changed "$RUNSC_CONFIG" 644 <<EOF
# written by scripts/k8s-cluster.sh: gVisor's containerd shim (containerd-shim-runsc-v1)
binary_name = "$SO_RUNSC"
root = "$RUN_DIR/runsc"
log_level = "info"
log_path = "$LOGS/runsc/%ID%/shim.log"

[runsc_config]
  network = "none"
  oci-seccomp = "true"
  debug-log = "$LOGS/runsc/%ID%/"
EOF
}

write_containerd_config() {
    write_if_changed "$CTRD_CONFIG" 644 <<EOF
# written by scripts/k8s-cluster.sh: the test cluster's own containerd (not the Docker engine's)
# run as $CTRD_BIN (SANDBOX_K8S_PLEG=$PLEG)
version = 2
root = "$CTRD_ROOT"
state = "$CTRD_STATE"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD_ROOT/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # no CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj as the kubelet asks (-998 for the sandbox)
  restrict_oom_score_adj = true
  # network namespaces under our state dir, not /var/run/netns
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false

# RuntimeClass gvisor (handler runsc): gVisor's own shim, which finds runsc through this config
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
  # gVisor's mount hints: a pod's annotations may share an in-memory emptyDir across its containers
  pod_annotations = ["dev.gvisor.spec.mount.*"]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = "$RUNSC_CONFIG"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "$CNI_BIN_DIR"
  conf_dir = "$CNI_CONF_DIR"
  max_conf_num = 1
EOF
}

# A bridge without an address (isGateway false) and no masquerading: pods get an eth0 in their own /24
# and no default route, so nothing outside the pod subnet is reachable.
write_cni_config() {
    write_if_changed "$CNI_CONF_DIR/10-$CNI_NETWORK.conflist" 644 <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "rangeEnd": "$POD_RANGE_END"}]],
        "dataDir": "$IPAM_DIR"
      }
    }
  ]
}
EOF
}

write_kubelet_config() {
    write_if_changed "$KUBELET_CONFIG" 644 <<EOF
# written by scripts/k8s-cluster.sh
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failSwapOn: false
podPidsLimit: 1024
$([ "$PLEG" = evented ] && printf 'featureGates:\n  EventedPLEG: true\n')
# no cluster DNS: pods get an empty resolv.conf (they have no route to any server anyway)
resolvConf: ""
clusterDomain: cluster.local
podLogsDir: $CLUSTER_DIR/pod-logs
volumePluginDir: $CLUSTER_DIR/volume-plugins
# the imported images cannot be pulled again: the kubelet must never garbage-collect them
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
# lowering the kubelet's own oom_score_adj needs CAP_SYS_RESOURCE, which root lacks here
oomScoreAdj: 0
# no KUBE-FIREWALL / KUBE-IPTABLES-HINT chains in the host's iptables (they serve kube-proxy; none here)
makeIPTablesUtilChains: false
# a container without a seccomp profile gets the runtime's default, never Unconfined
seccompDefault: true
# these hosts are cgroup v1 (hybrid); 1.34 still runs there when told so
failCgroupV1: false
EOF
}


# Every node-side configuration; a running component whose configuration changed is stopped here, and
# started again with it below.
ensure_node_configs() {
    mkdir -p "$CNI_CONF_DIR" "$KUBELET_ROOT" "$CTRD_ROOT" "$LOGS/runsc"
    CHANGED=0; write_containerd_config
    if [ "$CHANGED" = 1 ]; then stop_component containerd; fi
    # read by the shim at each pod start, and by containerd whenever its CNI directory changes
    write_runsc_config
    write_cni_config
    CHANGED=0; write_kubelet_config
    if [ "$CHANGED" = 1 ]; then stop_component kubelet; fi
}

containerd_answers() { ctr --address "$CTRD_SOCK" version >/dev/null 2>&1; }

# runsc writes a log directory per container (about 60 KiB): the newest 200 are kept for diagnosis.
prune_runsc_logs() {
    find "$LOGS/runsc" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' 2>/dev/null | sort -rn \
        | tail -n +201 | cut -d' ' -f2- | xargs -r rm -rf --
}

ensure_containerd() {
    component_running containerd && return 0
    so_check_socket_len "$CTRD_SOCK"
    mkdir -p "$CTRD_STATE"
    prune_runsc_logs
    # PATH: containerd looks its shims up there (containerd-shim-runsc-v1 lives in the bin dir).
    # The proxy variables send any image pull to a closed port on 127.0.0.1: a pod naming an image that
    # is not imported fails at once instead of sending traffic off the machine (loopback is never proxied).
    # (its own directory first: the runc shim of the same release)
    start_component containerd env PATH="$(dirname "$CTRD_BIN"):$BIN_DIR:$PATH" \
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 http_proxy= https_proxy= NO_PROXY= no_proxy= \
        "$CTRD_BIN" --config "$CTRD_CONFIG"
    wait_until 30 containerd_answers || die_with_log containerd "containerd did not answer on $CTRD_SOCK"
}

# The values the kubelet overwrites at start (vm.overcommit_memory, kernel.panic, ...): kept so that down
# gives the host its own back. A file left by a run that never got to down already holds the originals.
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
    kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

save_sysctls() {
    [ -f "$SYSCTL_SAVED" ] && return 0
    local k
    for k in "${KUBELET_SYSCTLS[@]}"; do
        printf '%s %s\n' "$k" "$(cat "/proc/sys/$k")"
    done >"$SYSCTL_SAVED.tmp"
    mv -f "$SYSCTL_SAVED.tmp" "$SYSCTL_SAVED"
}

restore_sysctls() {
    [ -f "$SYSCTL_SAVED" ] || return 0
    local k v
    while read -r k v; do
        printf '%s\n' "$v" >"/proc/sys/$k" 2>/dev/null || so_warn "could not restore $k to $v"
    done <"$SYSCTL_SAVED"
    rm -f "$SYSCTL_SAVED"
}

# The cgroup v1 hierarchies (and the unified one of a hybrid host) that are mounted.
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts; }

# The kubelet wants its cgroup root to exist in every hierarchy.
make_cgroup_root() {
    local m
    for m in $(cgroup_mounts); do mkdir -p "$m$CGROUP_ROOT"; done
}

ensure_kubelet() {
    component_running kubelet && return 0
    save_sysctls
    make_cgroup_root
    mkdir -p "$KUBELET_ROOT" "$CLUSTER_DIR/pod-logs" "$CLUSTER_DIR/volume-plugins"
    start_component kubelet "$BIN_DIR/kubelet" --config="$KUBELET_CONFIG" \
        --kubeconfig="$CLUSTER_DIR/kubelet.kubeconfig" --root-dir="$KUBELET_ROOT" --hostname-override="$NODE_NAME"
}

# --- what pods need on the node: images and seccomp profiles ------------------------------------------

# The pod sandbox ("pause") image: the base image whose command sleeps forever, as an unprivileged user.
# Rebuilt (in about a second, nothing fetched) only when the base image changed.
ensure_pause_image() {
    local base_id
    base_id="$(docker image inspect --format '{{.Id}}' "$SO_BASE_IMAGE" 2>/dev/null)" \
        || so_die "$SO_BASE_IMAGE is not on the Docker engine: run make setup"
    [ "$(so_image_label "$PAUSE_IMAGE" "$SO_LABEL_NS.base-image-id")" = "$base_id" ] && return 0
    so_say "building $PAUSE_IMAGE (the pod sandbox image)"
    printf 'FROM %s\nUSER 65535:65535\nCMD ["sleep", "infinity"]\n' "$SO_BASE_IMAGE" \
        | docker build -q --label "$SO_LABEL_NS.base-image-id=$base_id" --label "$SO_LABEL_NS.image=k8s-pause" \
            -t "$PAUSE_IMAGE" - >"$LOGS/pause-image.log" 2>&1 \
        || { cat "$LOGS/pause-image.log" >&2; so_die "could not build $PAUSE_IMAGE"; }
}

# containerd names an imported image after the registry it would come from: match the repository path.
containerd_has_image() {  # containerd_has_image REF LISTING
    awk -v r="$1" '$0 == r || substr($0, length($0) - length(r)) == "/" r {found = 1} END {exit !found}' <<<"$2"
}

image_stamp() { printf '%s/%s.id\n' "$IMAGE_STAMPS" "$(printf '%s' "$1" | tr '/:' '__')"; }

# docker save | ctr import for every image whose Docker id changed since it was imported (a stamp per
# image) or that containerd no longer has; the controller image only when `make image` built it.
ensure_images() {
    so_use_engine
    ensure_pause_image
    mkdir -p "$IMAGE_STAMPS"
    local listing present ref id want=() ids=()
    listing="$(docker images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}')"
    present="$(kctr images ls -q)"
    for ref in "$PAUSE_IMAGE" "${SANDBOX_IMAGES[@]}" "$CONTROLLER_IMAGE"; do
        id="$(awk -v r="$ref" '$1 == r {print $2; exit}' <<<"$listing")"
        if [ -z "$id" ]; then
            [ "$ref" = "$CONTROLLER_IMAGE" ] && continue
            so_die "$ref is not on the Docker engine: run make setup"
        fi
        if [ "$(cat "$(image_stamp "$ref")" 2>/dev/null)" = "$id" ] && containerd_has_image "$ref" "$present"; then
            continue
        fi
        want+=("$ref")
        ids+=("$id")
    done
    [ "${#want[@]}" -eq 0 ] && return 0
    so_say "importing ${want[*]} into the cluster's containerd"
    docker save "${want[@]}" | kctr images import - >/dev/null
    local i
    for i in "${!want[@]}"; do printf '%s\n' "${ids[$i]}" >"$(image_stamp "${want[$i]}")"; done
}

# Pods name them as localhostProfile: sandbox-orchestrator/<file>.
ensure_seccomp_profiles() {
    local f
    mkdir -p "$SECCOMP_DIR"
    for f in "$REPO_DIR"/orchestrator/profiles/builtin/seccomp/*.json; do
        cmp -s "$f" "$SECCOMP_DIR/${f##*/}" || install -m 644 "$f" "$SECCOMP_DIR/${f##*/}"
    done
}

# --- cluster objects -----------------------------------------------------------------------------------

node_ready() {
    [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

default_service_account() { kc -n default get serviceaccount default; }

# The API server's kubelet client may use the kubelet API (logs, exec, attach): the built-in role for it.
apply_rbac() {
    kc apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: sandbox-orchestrator:apiserver-kubelet-client
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kubelet-api-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: kube-apiserver-kubelet-client
YAML
}

apply_runtimeclass() {
    kc apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc
YAML
}

# --- gVisor ------------------------------------------------------------------------------------------

PROBE_NS=sandbox-orchestrator-gvisor-probe

# What the probe's verdict depends on: the shim, runsc and containerd.
gvisor_key() {
    printf 'shim=%s runsc=%s containerd=%s\n' "$(cat "$BIN_DIR/containerd-shim-runsc-v1.version" 2>/dev/null)" \
        "$(sha256sum <"$SO_RUNSC" | cut -c1-16)" "$("$CTRD_BIN" --version | awk '{print $3}')"
}

# A hardened pod under RuntimeClass gvisor must run and see gVisor's kernel, not the host's: gVisor answers
# uname with its own release (4.4.0). (dmesg needs CAP_SYSLOG, which a restricted pod does not have.)
probe_gvisor() {
    kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $PROBE_NS
  labels:
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: v1
kind: Pod
metadata:
  name: probe
  namespace: $PROBE_NS
spec:
  runtimeClassName: gvisor
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 1000
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: probe
    image: $(so_sandbox_image minimal)
    imagePullPolicy: Never
    command: ["uname", "-r"]
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
YAML
    local phase="" deadline=$((SECONDS + 90))
    while [ "$SECONDS" -lt "$deadline" ]; do
        phase="$(kc -n "$PROBE_NS" get pod probe -o jsonpath='{.status.phase}' 2>/dev/null || true)"
        case "$phase" in Succeeded|Failed) break ;; esac
        sleep 0.5
    done
    local release
    release="$(kc -n "$PROBE_NS" logs probe 2>/dev/null || true)"
    [ "$phase" = Succeeded ] && [ -n "$release" ] && [ "$release" != "$(uname -r)" ]
}

# Why the probe failed, for docs and for whoever reads the warning: the pod's state, its events, the shim's log.
explain_gvisor_failure() {
    {
        echo "# the gVisor probe failed on $(date -Is) ($(gvisor_key))"
        echo "## pod status"
        kc -n "$PROBE_NS" get pod probe -o jsonpath='{.status}' || true; echo
        echo "## events"
        kc -n "$PROBE_NS" get events -o custom-columns=REASON:.reason,MESSAGE:.message || true
        echo "## pod log"
        kc -n "$PROBE_NS" logs probe || true
        echo "## containerd log (runsc)"
        grep -i runsc "$LOGS/containerd.log" | tail -n 20 || true
    } >"$GVISOR_REASON" 2>&1
}

# RuntimeClass gvisor exists only when gVisor really runs pods here (proven once per shim/runsc/containerd
# version); otherwise none, and the reason is in gvisor.unavailable (the backend then reports
# SANDBOX.UNAVAILABLE for profiles that ask for gVisor).
ensure_gvisor() {
    local key
    if [ ! -x "$SO_RUNSC" ] || [ ! -x "$BIN_DIR/containerd-shim-runsc-v1" ]; then
        printf 'runsc (%s) or containerd-shim-runsc-v1 (%s) is missing\n' "$SO_RUNSC" "$BIN_DIR" >"$GVISOR_REASON"
        kc delete runtimeclass gvisor --ignore-not-found >/dev/null
        rm -f "$GVISOR_STAMP"
        so_warn "no RuntimeClass gvisor: $(cat "$GVISOR_REASON")"
        return 0
    fi
    key="$(gvisor_key)"
    apply_runtimeclass
    [ "$(cat "$GVISOR_STAMP" 2>/dev/null)" = "$key" ] && return 0
    if probe_gvisor; then
        printf '%s\n' "$key" >"$GVISOR_STAMP"
        rm -f "$GVISOR_REASON"
    else
        explain_gvisor_failure
        kc delete runtimeclass gvisor --ignore-not-found >/dev/null
        rm -f "$GVISOR_STAMP"
        so_warn "gVisor does not run pods here: no RuntimeClass gvisor (details: $GVISOR_REASON)"
    fi
    kc delete namespace "$PROBE_NS" --wait=false --ignore-not-found >/dev/null 2>&1 || true
}

# --- up ----------------------------------------------------------------------------------------------

require_root() { [ "$(id -u)" = 0 ] || so_die "$1 needs root (the kubelet and containerd make cgroups, mounts and network namespaces)"; }

lock_cluster() {
    exec 9>"$CLUSTER_DIR/cluster.lock"
    flock -w 900 9 || so_die "timed out waiting for $CLUSTER_DIR/cluster.lock"
}

all_running() {
    local c
    for c in "${COMPONENTS[@]}"; do component_running "$c" || return 1; done
}

cmd_up() {
    require_root up
    local t0=$SECONDS
    mkdir -p "$CLUSTER_DIR" "$RUN_DIR" "$LOGS"
    chmod 700 "$CLUSTER_DIR" "$RUN_DIR"
    lock_cluster
    ensure_binaries
    ensure_packages
    ensure_containerd_binary
    ensure_pki
    ensure_kubeconfigs
    ensure_node_configs
    # a run that stopped half-way (or any component that died) redoes the waits and the objects below
    if ! all_running; then
        rm -f "$RUN_DIR/up.done"
        so_say "starting the cluster (logs in $LOGS)"
    fi

    ensure_etcd
    ensure_apiserver
    ensure_containerd
    ensure_images
    ensure_seccomp_profiles
    ensure_kubelet
    ensure_controller_manager
    ensure_scheduler
    ensure_egress_attachment

    if [ -f "$RUN_DIR/up.done" ]; then
        node_ready || wait_until 60 node_ready || die_with_log kubelet "node $NODE_NAME is not Ready"
        return 0
    fi
    apply_rbac
    wait_until 90 node_ready || die_with_log kubelet "node $NODE_NAME did not become Ready"
    wait_until 60 default_service_account \
        || die_with_log kube-controller-manager "the default ServiceAccount did not appear"
    ensure_gvisor
    touch "$RUN_DIR/up.done"
    so_say "up in $((SECONDS - t0)) s: $API_SERVER (KUBECONFIG=$ADMIN_KUBECONFIG)"
}

# The egress attachment (see EGRESS_NETNS): the bridge made here if no pod made it yet (the CNI plugin takes
# an existing one), the namespace, and the veth between them. Idempotent.
ensure_egress_attachment() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge || so_die "could not make the bridge $BRIDGE"
    fi
    ip link set "$BRIDGE" up
    [ -e "/var/run/netns/$EGRESS_NETNS" ] || ip netns add "$EGRESS_NETNS" || so_die "could not make $EGRESS_NETNS"
    if ! ip link show "$EGRESS_LINK" >/dev/null 2>&1; then
        ip link add "$EGRESS_LINK" type veth peer name so-k8s-egn netns "$EGRESS_NETNS" \
            || so_die "could not make the egress attachment's veth"
    fi
    ip link set "$EGRESS_LINK" master "$BRIDGE" up
    local inside=(ip netns exec "$EGRESS_NETNS")
    "${inside[@]}" ip link set lo up
    "${inside[@]}" ip -4 -o addr show dev so-k8s-egn | grep -qF " $EGRESS_IP/" \
        || "${inside[@]}" ip addr add "$EGRESS_IP/${POD_SUBNET#*/}" dev so-k8s-egn
    "${inside[@]}" ip link set so-k8s-egn up
}

remove_egress_attachment() {
    if ip link show "$EGRESS_LINK" >/dev/null 2>&1; then ip link del "$EGRESS_LINK" || true; fi
    if [ -e "/var/run/netns/$EGRESS_NETNS" ]; then ip netns del "$EGRESS_NETNS" || so_warn "could not delete $EGRESS_NETNS"; fi
}

# --- down --------------------------------------------------------------------------------------------

# Pods go through the kubelet while it runs, so it unmounts their volumes and tears their sandboxes down.
delete_pods() {
    api_ready && component_running kubelet || return 0
    kc delete pods --all --all-namespaces --grace-period=1 --timeout=60s --wait=true >/dev/null 2>&1 \
        || so_warn "not every pod was deleted in 60 s; removing what is left by force"
}

# Whatever containerd still runs in the Kubernetes namespace: killed, its tasks and containers removed.
remove_containers() {
    containerd_answers || return 0
    local id
    for id in $(kctr tasks ls -q 2>/dev/null); do kctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $(kctr tasks ls -q 2>/dev/null); do kctr tasks rm -f "$id" >/dev/null 2>&1 || true; done
    for id in $(kctr containers ls -q 2>/dev/null); do kctr containers rm "$id" >/dev/null 2>&1 || true; done
}

# Shims and runsc processes that outlived containerd (their command lines name our socket or runsc root),
# then every process left in the pods' cgroups.
kill_leftovers() {
    local pid m
    for pid in $(pgrep -f -- "$CTRD_SOCK|$RUN_DIR/runsc" || true); do
        [ "$pid" = "$$" ] || kill -KILL "$pid" 2>/dev/null || true
    done
    for m in $(cgroup_mounts); do
        [ -d "$m$CGROUP_ROOT" ] || continue
        find "$m$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do
            kill -KILL "$pid" 2>/dev/null || true
        done
    done
}

# Empty cgroups below our root, deepest first (rmdir refuses a cgroup that still has processes).
remove_cgroups() {
    local m
    for m in $(cgroup_mounts); do
        [ -d "$m$CGROUP_ROOT" ] || continue
        find "$m$CGROUP_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null || true
        [ ! -d "$m$CGROUP_ROOT" ] || so_warn "could not remove the cgroup $m$CGROUP_ROOT"
    done
}

# Mount points below our directories (overlay roots, sandbox shm, netns, kubelet volumes), deepest first.
our_mounts() {
    awk -v a="$CLUSTER_DIR" -v b="$RUN_DIR" '
        $2 == a || index($2, a "/") == 1 || $2 == b || index($2, b "/") == 1 {print length($2) " " $2}' /proc/mounts \
        | sort -rn | cut -d' ' -f2-
}

unmount_ours() {
    local m
    for m in $(our_mounts); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || so_warn "could not unmount $m"
    done
}

# Network namespaces of pods that an older configuration (or a containerd without netns under its state
# dir) made in /var/run/netns: ours when their eth0 has an address in the pod subnet.
remove_stray_netns() {
    local ns prefix="${POD_SUBNET%.*}."
    for ns in /var/run/netns/cni-*; do
        [ -e "$ns" ] || continue
        ip netns exec "${ns##*/}" ip -4 -o addr show 2>/dev/null | grep -qF " inet $prefix" || continue
        umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
        rm -f "$ns"
    done
}

remove_network() {
    remove_stray_netns
    remove_egress_attachment
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" || so_warn "could not delete $BRIDGE"; fi
    # libcni's result cache (containerd 1.6 cannot move it): only our network's entries
    rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null || true
}

cmd_down() {
    require_root down
    [ -d "$CLUSTER_DIR" ] || return 0
    mkdir -p "$RUN_DIR"
    lock_cluster
    BIN_DIR="$(bash "$SCRIPT_DIR/k8s-build.sh" --bin-dir)"
    rm -f "$RUN_DIR/up.done"
    # nothing recreates or places pods while they are deleted
    stop_component kube-controller-manager
    stop_component kube-scheduler
    delete_pods
    stop_component kubelet
    remove_containers
    stop_component containerd 20
    kill_leftovers
    # the API server's graceful shutdown waits up to a minute for its clients' open watches (anyone's
    # kubectl wait or informer): a few seconds, then it is killed; its state goes with etcd's below
    stop_component kube-apiserver 3 quiet
    stop_component etcd
    unmount_ours
    remove_network
    remove_cgroups
    restore_sysctls
    # the cluster's objects go with it (the next up starts from an empty etcd); binaries, PKI, logs and
    # the imported images stay. --one-file-system: never into a mount that could not be removed.
    rm -rf --one-file-system "$ETCD_DATA" "$KUBELET_ROOT" "$CLUSTER_DIR/pod-logs" "$RUN_DIR"
    local left
    left="$(our_mounts)"
    [ -z "$left" ] || so_warn "mounts left: $left"
}

# --- status / env ------------------------------------------------------------------------------------

cmd_status() {
    BIN_DIR="$(bash "$SCRIPT_DIR/k8s-build.sh" --bin-dir)"
    if [ -x "$BIN_DIR/kubectl" ] && [ -r "$ADMIN_KUBECONFIG" ] && api_ready && node_ready; then
        echo "up: $API_SERVER, node $NODE_NAME Ready"
        return 0
    fi
    echo "down"
    return 1
}

cmd_env() {
    BIN_DIR="$(bash "$SCRIPT_DIR/k8s-build.sh" --bin-dir)"
    printf 'export KUBECONFIG=%q\n' "$ADMIN_KUBECONFIG"
    # where a controller on this host opens the egress proxy for the pods (backend.kubernetes.egress)
    printf 'export SANDBOX_K8S_EGRESS_NETNS=%q SANDBOX_K8S_EGRESS_ADDRESS=%q\n' "/var/run/netns/$EGRESS_NETNS" "$EGRESS_IP"
    # shellcheck disable=SC2016  # $PATH is for the shell that evaluates this line
    printf 'export PATH=%q:"$PATH"\n' "$BIN_DIR"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
