#!/usr/bin/env bash
# Builds the Kubernetes binaries of the test cluster from the Go module proxy (no registry, no release
# download): kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd, helm, and
# gVisor's containerd shim (containerd-shim-runsc-v1: pods under RuntimeClass gvisor need it; the runc
# shim pointed at runsc leaves the pod sandbox stuck in "created"), with one patch (see build_shim).
# Cached by version under $SANDBOX_STATE_DIR/k8s/<pins>/bin: rebuilt only when a pin below changes.
#
# k8s.io/kubernetes replaces its 31 staging modules with ./staging paths, which a dependent module cannot
# follow, so a wrapper module requires it and replaces each staging module with its published version.
#
# Usage: k8s-build.sh             build what is missing, then print the bin dir
#        k8s-build.sh --bin-dir   print the bin dir only (nothing is built)
#
# 1.34 is pinned on purpose: from 1.35 the kubelet refuses cgroup v1 by default (these hosts are hybrid v1).
set -euo pipefail
SO_LOG_PREFIX=k8s-build
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

K8S_VERSION="${SANDBOX_K8S_VERSION:-v1.34.3}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"           # k8s.io/api v0.34.3 ships with kubernetes v1.34.3
HELM_VERSION="${SANDBOX_HELM_VERSION:-v3.19.0}"
# gVisor publishes no tags on its Go branch: a pseudo-version of gvisor.dev/gvisor pins the shim. This one
# is the Go branch two days after release-20240729.0, the runsc that make setup installs (Debian trixie's
# 0.0~20240729.0). Newer shims are built on containerd 2 and answer containerd's start call in a JSON form
# that Debian bookworm's containerd 1.6 cannot read ("dial unix {"version":2,...}: invalid argument").
GVISOR_SHIM_VERSION="${SANDBOX_GVISOR_SHIM_VERSION:-v0.0.0-20240731183317-ba03cb2cbb61}"
# The test cluster's kubelet keeps its pods here (scripts/k8s-cluster.sh: $CLUSTER_DIR/kubelet/pods).
KUBELET_PODS_DIR="$SO_STATE_DIR/k8s/cluster/kubelet/pods"
# Names the patches build_shim applies (and where they point); part of the stamp, so a changed patch
# rebuilds the shim.
GVISOR_SHIM_PATCH="oom-score-best-effort,kubelet-pods-dir=$KUBELET_PODS_DIR"
K8S_DIR="$SO_STATE_DIR/k8s/$K8S_VERSION-helm$HELM_VERSION"
BIN_DIR="$K8S_DIR/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd helm)
# Stamped into the Kubernetes binaries the way the upstream release build does, so the API server reports
# v1.34.3 rather than "v0.0.0-master+$Format:%H$" (helm and kubectl compare versions, charts set kubeVersion).
# BUILD_REV names how they are built: a change rebuilds them.
BUILD_REV="version-ldflags-1"
major_minor="${K8S_VERSION#v}"
VERSION_LDFLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    VERSION_LDFLAGS="$VERSION_LDFLAGS -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=${major_minor%%.*}"
    minor="${major_minor#*.}"
    VERSION_LDFLAGS="$VERSION_LDFLAGS -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
done

if [ "${1:-}" = --bin-dir ]; then
    echo "$BIN_DIR"
    exit 0
fi

command -v go >/dev/null || so_die "go is required (the binaries are built from the Go module proxy)"

SHIM="$BIN_DIR/containerd-shim-runsc-v1"

# The shim's pin is not in the directory name: a stamp next to it records the version it was built from.
have_shim() {
    [ -x "$SHIM" ] && [ "$(cat "$SHIM.version" 2>/dev/null)" = "$GVISOR_SHIM_VERSION+$GVISOR_SHIM_PATCH" ]
}

have_kubernetes() {
    local b
    for b in "${BINARIES[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
    [ "$(cat "$BIN_DIR/kubernetes.build" 2>/dev/null)" = "$BUILD_REV" ]
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

REBUILD=0
build() {  # build <name> <package> (in the wrapper module)
    [ -x "$BIN_DIR/$1" ] && [ "$REBUILD" = 0 ] && return 0
    local t0=$SECONDS
    (cd "$K8S_DIR/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w$VERSION_LDFLAGS" -o "$BIN_DIR/$1.tmp" "$2")
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
    # built another way (or by an older version of this script): every Kubernetes binary again, each
    # replaced only when its new build is done (a running cluster keeps its commands meanwhile)
    [ "$(cat "$BIN_DIR/kubernetes.build" 2>/dev/null)" = "$BUILD_REV" ] || REBUILD=1
    write_wrapper_module "$K8S_DIR/src"
    build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
    build kubelet k8s.io/kubernetes/cmd/kubelet
    build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
    build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
    build kubectl k8s.io/kubernetes/cmd/kubectl
    build etcd go.etcd.io/etcd/server/v3
    build_helm
    printf '%s\n' "$BUILD_REV" >"$BIN_DIR/kubernetes.build"
}

# The shim's start makes its own long-lived process unkillable by the OOM killer (oom_score_adj -999), and
# gives up when the kernel refuses: lowering oom_score_adj needs CAP_SYS_RESOURCE, which root lacks on these
# hosts ("failed to set OOM Score on shim: write /proc/<pid>/oom_score_adj: permission denied"). The patch
# lets it go on at containerd's score when the write is refused for want of permission; any other error
# still stops it. And the shim finds a pod's volumes below the kubelet's root, which it takes to be
# /var/lib/kubelet (every packaged node's): the second patch points it at the test cluster's, so that an
# in-memory emptyDir its pod annotates (dev.gvisor.spec.mount.NAME.*) becomes one tmpfs inside the gVisor
# sandbox, shared by the pod's containers (the Kubernetes backend's stdio pipes need that). The module is
# copied out of the module cache (read-only there) and built in place.
build_shim() {
    local t0=$SECONDS mod src="$K8S_DIR/gvisor-src" file=pkg/shim/service.go volumes=pkg/shim/utils/volumes.go
    local call='if err := shim.SetScore(cmd.Process.Pid); err != nil'
    local pods_dir='var kubeletPodsDir = "/var/lib/kubelet/pods"'
    mod="$(go mod download -json "gvisor.dev/gvisor@$GVISOR_SHIM_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
    [ -d "$mod" ] || so_die "could not download gvisor.dev/gvisor@$GVISOR_SHIM_VERSION"
    rm -rf "$src" "$SHIM" "$SHIM.version"
    cp -r "$mod" "$src"
    chmod -R u+w "$src"
    grep -qF "$call {" "$src/$file" || so_die "gVisor $GVISOR_SHIM_VERSION: $file no longer has the call to patch"
    sed -i "s|$call {|$call \&\& !os.IsPermission(err) {|" "$src/$file"
    grep -qF "$pods_dir" "$src/$volumes" || so_die "gVisor $GVISOR_SHIM_VERSION: $volumes no longer has $pods_dir"
    sed -i "s|$pods_dir|var kubeletPodsDir = \"$KUBELET_PODS_DIR\"|" "$src/$volumes"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$SHIM.tmp" ./shim)
    mv "$SHIM.tmp" "$SHIM"
    rm -rf "$src"
    printf '%s\n' "$GVISOR_SHIM_VERSION+$GVISOR_SHIM_PATCH" >"$SHIM.version"
    so_say "built containerd-shim-runsc-v1 (gVisor $GVISOR_SHIM_VERSION, patched) in $((SECONDS - t0)) s"
}

have_kubernetes || build_kubernetes
have_shim || build_shim
echo "$BIN_DIR"
