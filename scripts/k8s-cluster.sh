#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the test tier, on 127.0.0.1 only (docs/kubernetes-cluster.md).
#
# Usage: k8s-cluster.sh up       start what is not running, wait until the node is Ready (idempotent;
#                                well under a second when already up)
#        k8s-cluster.sh down     delete the pods, stop everything up started, clean mounts, network
#                                namespaces, the bridge and the cluster's objects (binaries, PKI and the
#                                imported images stay)
#        k8s-cluster.sh status   exit 0 when the API server answers and the node is Ready
#        k8s-cluster.sh env      print `export KUBECONFIG=...` and `export PATH=<bin dir>:$PATH`
#
# This file is the thin part: the host's packages (apt), the binaries (scripts/k8s-build.sh, from the Go
# module proxy), Debian trixie's containerd for SANDBOX_K8S_PLEG=evented; then it runs the cluster itself,
# scripts/testcluster (`python -m scripts.testcluster`): settings, configurations, PKI, the six daemons,
# RBAC and RuntimeClass through the official client, down's clean-up. With the venv's python
# (.venv/bin/python: `make venv`; up and down need its kubernetes client), else the system's python3
# (enough for status and env).
#
# Environment: SANDBOX_STATE_DIR, SANDBOX_RUN_DIR, SANDBOX_RUNSC, SANDBOX_K8S_POD_SUBNET (settings.py),
#   SANDBOX_K8S_PLEG  how the kubelet learns that a container started or ended:
#     generic (default)  by relisting every second (the kubelet's default; bookworm's containerd): 0-1 s late
#     evented            from the runtime's container events (alpha feature gate EventedPLEG), with Debian
#                        trixie's containerd 1.7 (bookworm's 1.6 answers "not implemented"), unpacked once
#                        into $SANDBOX_STATE_DIR/k8s/containerd-trixie: an end is reported in ~30 ms. For
#                        benchmarks only: with it a pod stopped by activeDeadlineSeconds was not reported
#                        ended for many seconds (5 deadline tests failed, 2026-11-25), so tests use generic.
#     Switching restarts containerd and the kubelet (their configurations change); running pods end.
set -euo pipefail
SO_LOG_PREFIX=k8s-cluster
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$SCRIPT_DIR")"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

CTRD_TRIXIE_DIR="$SO_STATE_DIR/k8s/containerd-trixie"

require_root() { [ "$(id -u)" = 0 ] || so_die "$1 needs root (the kubelet and containerd make cgroups, mounts and network namespaces)"; }

# containerd and runc come with the engine packages (make setup); the CNI plugins are ours to add, and the
# tools the cluster uses may be missing from a minimal machine.
ensure_packages() {
    local pkgs=()
    command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || pkgs+=(containerd)
    command -v runc >/dev/null 2>&1 || pkgs+=(runc)
    command -v openssl >/dev/null 2>&1 || pkgs+=(openssl)
    command -v ip >/dev/null 2>&1 || pkgs+=(iproute2)
    [ "$(dpkg-query -W -f='${Status}' containernetworking-plugins 2>/dev/null)" = "install ok installed" ] \
        || pkgs+=(containernetworking-plugins)
    [ "${#pkgs[@]}" -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || so_die "missing ${pkgs[*]} and no apt-get to install them"
    so_say "apt-get install ${pkgs[*]}"
    # policy-rc.d: no service a package ships (cni-dhcp, containerd) may start on its own.
    local created_policy=0 rc=0 log
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\n# temporary, written by sandbox-orchestrator k8s-cluster.sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    log="$(mktemp "${TMPDIR:-/tmp}/k8s-cluster-apt.XXXXXX")"
    # another up installing at the same time: wait for dpkg's lock rather than fail
    { DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 update \
        && DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
            "${pkgs[@]}"; } >"$log" 2>&1 || rc=$?
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    if [ "$rc" != 0 ]; then
        tail -n 20 "$log" >&2
        rm -f "$log"
        so_die "apt-get install ${pkgs[*]} failed"
    fi
    rm -f "$log"
}

# SANDBOX_K8S_PLEG=evented: Debian trixie's containerd (>= 1.7), fetched once without installing it (the
# Docker engine keeps its own containerd). Prints its path.
trixie_containerd() {
    if [ ! -x "$CTRD_TRIXIE_DIR/usr/bin/containerd" ]; then
        mkdir -p "$(dirname "$CTRD_TRIXIE_DIR")"
        exec 7>"$CTRD_TRIXIE_DIR.lock"
        flock -w 600 7 || so_die "timed out waiting for $CTRD_TRIXIE_DIR.lock"
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
    printf '%s\n' "$CTRD_TRIXIE_DIR/usr/bin/containerd"
}

# The cluster itself: scripts/testcluster with the venv's python when there is one (its kubernetes client),
# else the system's. -P: the checkout on PYTHONPATH, never the caller's working directory, names `scripts`.
run_cluster() {
    local python="$REPO_DIR/.venv/bin/python"
    [ -x "$python" ] || python="$(command -v python3)" || so_die "no python3 (make venv makes .venv/bin/python)"
    PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -P -m scripts.testcluster "$@"
}

case "${1:-}" in
    up)
        require_root up
        bin_dir="$(bash "$SCRIPT_DIR/k8s-build.sh")" || so_die "scripts/k8s-build.sh failed"
        ensure_packages
        args=(up --bin-dir "$bin_dir")
        if [ "${SANDBOX_K8S_PLEG:-generic}" = evented ]; then
            containerd="$(trixie_containerd)"
            args+=(--containerd "$containerd")
        fi
        run_cluster "${args[@]}"
        ;;
    down | status | env)
        if [ "$1" = down ]; then require_root down; fi
        run_cluster "$1" --bin-dir "$(bash "$SCRIPT_DIR/k8s-build.sh" --bin-dir)"
        ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
