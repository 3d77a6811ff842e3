#!/usr/bin/env bash
# Builds the Kubernetes binaries of the test cluster from the Go module proxy (no registry, no release
# download): kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd, helm, and
# gVisor's containerd shim (containerd-shim-runsc-v1: pods under RuntimeClass gvisor need it; the runc
# shim pointed at runsc leaves the pod sandbox stuck in "created").
# Cached by version under $SANDBOX_STATE_DIR/k8s/<pins>/bin: rebuilt only when a pin below changes.
#
# k8s.io/kubernetes replaces its 31 staging modules with ./staging paths, which a dependent module cannot
# follow, so a wrapper module requires it and replaces each staging module with its published version.
# 1.34 is pinned on purpose: from 1.35 the kubelet refuses cgroup v1 by default (these hosts are hybrid v1).
set -euo pipefail
SO_LOG_PREFIX=k8s-build
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

K8S_VERSION="${SANDBOX_K8S_VERSION:-v1.34.3}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"           # k8s.io/api v0.34.3 ships with kubernetes v1.34.3
HELM_VERSION="${SANDBOX_HELM_VERSION:-v3.19.0}"
# gVisor publishes no tags on its Go branch: a pseudo-version of gvisor.dev/gvisor pins the shim.
GVISOR_SHIM_VERSION="${SANDBOX_GVISOR_SHIM_VERSION:-v0.0.0-20260905035102-160fafc42237}"
K8S_DIR="$SO_STATE_DIR/k8s/$K8S_VERSION-helm$HELM_VERSION"
BIN_DIR="$K8S_DIR/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd helm)

command -v go >/dev/null || so_die "go is required (the binaries are built from the Go module proxy)"

SHIM="$BIN_DIR/containerd-shim-runsc-v1"

# The shim's pin is not in the directory name: a stamp next to it records the version it was built from.
have_shim() {
    [ -x "$SHIM" ] && [ "$(cat "$SHIM.version" 2>/dev/null)" = "$GVISOR_SHIM_VERSION" ]
}

have_kubernetes() {
    local b
    for b in "${BINARIES[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
}

have_all() { have_kubernetes && have_shim; }

if have_all; then
    echo "$BIN_DIR"
    exit 0
fi

mkdir -p "$K8S_DIR/src" "$BIN_DIR"
exec 8>"$K8S_DIR/build.lock"
flock -w 1800 8 || so_die "timed out waiting for $K8S_DIR/build.lock"
if have_all; then echo "$BIN_DIR"; exit 0; fi

# The wrapper module: requires k8s.io/kubernetes and points each staging module at its published version.
write_wrapper_module() {
    local src="$1" kube_mod
    kube_mod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
    [ -f "$kube_mod" ] || so_die "could not download k8s.io/kubernetes@$K8S_VERSION"
    {
        echo "module sandbox-orchestrator.local/k8s-binaries"
        echo
        echo "go 1.24"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$STAGING_VERSION"'#p' "$kube_mod"
    } >"$src/go.mod"
    cat >"$src/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
    # quiet when it works; run again to show the errors when it does not
    (cd "$src" && { go mod tidy >/dev/null 2>&1 || go mod tidy; })
}

build() {  # build <name> <package> (in the wrapper module)
    [ -x "$BIN_DIR/$1" ] && return 0
    local t0=$SECONDS
    (cd "$K8S_DIR/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/$1.tmp" "$2")
    mv "$BIN_DIR/$1.tmp" "$BIN_DIR/$1"
    so_say "built $1 in $((SECONDS - t0)) s"
}

build_helm() {
    [ -x "$BIN_DIR/helm" ] && return 0
    local t0=$SECONDS
    GOBIN="$K8S_DIR/helm-bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mv "$K8S_DIR/helm-bin/helm" "$BIN_DIR/helm"
    so_say "built helm in $((SECONDS - t0)) s"
}

build_kubernetes() {
    so_say "building Kubernetes $K8S_VERSION and helm $HELM_VERSION into $BIN_DIR (first time only: minutes)"
    write_wrapper_module "$K8S_DIR/src"
    build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
    build kubelet k8s.io/kubernetes/cmd/kubelet
    build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
    build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
    build kubectl k8s.io/kubernetes/cmd/kubectl
    build etcd go.etcd.io/etcd/server/v3
    build_helm
}

build_shim() {
    local t0=$SECONDS
    rm -f "$SHIM" "$SHIM.version"
    GOBIN="$K8S_DIR/gvisor-bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
        "gvisor.dev/gvisor/shim@$GVISOR_SHIM_VERSION"
    mv "$K8S_DIR/gvisor-bin/shim" "$SHIM"
    printf '%s\n' "$GVISOR_SHIM_VERSION" >"$SHIM.version"
    so_say "built containerd-shim-runsc-v1 in $((SECONDS - t0)) s"
}

have_kubernetes || build_kubernetes
have_shim || build_shim
echo "$BIN_DIR"
