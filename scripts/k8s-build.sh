#!/usr/bin/env bash
# Builds the Kubernetes binaries of the test cluster from the Go module proxy (no registry, no release
# download): kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd and helm.
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
K8S_DIR="$SO_STATE_DIR/k8s/$K8S_VERSION-helm$HELM_VERSION"
BIN_DIR="$K8S_DIR/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd helm)

command -v go >/dev/null || so_die "go is required (the binaries are built from the Go module proxy)"

have_all() {
    local b
    for b in "${BINARIES[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
}

if have_all; then
    echo "$BIN_DIR"
    exit 0
fi

mkdir -p "$K8S_DIR/src" "$BIN_DIR"
exec 8>"$K8S_DIR/build.lock"
flock -w 1800 8 || so_die "timed out waiting for $K8S_DIR/build.lock"
if have_all; then echo "$BIN_DIR"; exit 0; fi

src="$K8S_DIR/src"
so_say "building Kubernetes $K8S_VERSION and helm $HELM_VERSION into $BIN_DIR (first time only: minutes)"
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
(cd "$src" && go mod tidy >/dev/null 2>&1 || go mod tidy)

build() {  # build <name> <package> (in the wrapper module)
    [ -x "$BIN_DIR/$1" ] && return 0
    local t0=$SECONDS
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/$1.tmp" "$2")
    mv "$BIN_DIR/$1.tmp" "$BIN_DIR/$1"
    so_say "built $1 in $((SECONDS - t0)) s"
}
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kubelet k8s.io/kubernetes/cmd/kubelet
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kubectl k8s.io/kubernetes/cmd/kubectl
build etcd go.etcd.io/etcd/server/v3

if [ ! -x "$BIN_DIR/helm" ]; then
    t0=$SECONDS
    GOBIN="$K8S_DIR/helm-bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    mv "$K8S_DIR/helm-bin/helm" "$BIN_DIR/helm"
    so_say "built helm in $((SECONDS - t0)) s"
fi
echo "$BIN_DIR"
