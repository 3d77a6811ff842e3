#!/usr/bin/env bash
# The MCP Inspector's command-line client (npm's @modelcontextprotocol/inspector-cli), for the tests that drive
# our MCP server with a client that is not ours: stdio (it starts the server) and Streamable HTTP (--transport
# http, --header 'Authorization: Bearer ...'), one method a run, the result as JSON on stdout.
#
# Version 1.0.3, the last of the v1 line (the Inspector's v2 is another package, @modelcontextprotocol/inspector
# 2.x, that needs node >= 22.19 and brings a web and terminal UI with it). v1's CLI declares no engines, and every
# package of its tree takes node 20 (installed with --engine-strict): it runs on the project's node 20 from
# scripts/ci-externals.sh, never on a node of the machine's (a fresh machine may have none). The whole tree is
# pinned by scripts/mcp-inspector/package-lock.json (npm ci checks every package's sha512 there).
#
# Cached by version under $SANDBOX_STATE_DIR/mcp-inspector/<version>: installed into a temporary directory beside
# it, then renamed, so an install that failed halfway is never taken as done; installed again when the lockfile
# or the node changes. npm's own client runs it, on the project's node (PATH), with no install scripts.
#
# The package's own bin (build/cli.js) is v1's launcher: it wants --cli, prints a deprecation notice and runs
# `node` from PATH. The wrapper runs the client itself (build/index.js) on the project's node instead. That file
# imports its package.json as ../package.json when the *working directory's* parent has a package.json, else as
# ../../package.json, which does not exist in this layout: every run from elsewhere failed with "Cannot find
# module .../node_modules/@modelcontextprotocol/package.json" (the Inspector's issue 1334, closed unfixed with
# v1's deprecation). A copy of the package's name and version is put there.
#
# Usage: mcp-inspector.sh          install what is missing, then print the wrapper's path, an executable:
#                                  <wrapper> <command> [args...] --method tools/list
#                                  <wrapper> http://127.0.0.1:PORT/mcp --transport http --header 'Authorization: Bearer T' --method tools/list
#        mcp-inspector.sh --dir    print the install directory only (nothing is installed)
# The result is the JSON of the MCP result on stdout (no newline at the end), exit 0, also for a tool's isError;
# exit 1 with one line on stderr otherwise. A --tool-arg value is JSON first: text=123 sends the number 123
# (text='"123"' the string).
set -euo pipefail
SO_LOG_PREFIX=mcp-inspector
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

INSPECTOR_PACKAGE="@modelcontextprotocol/inspector-cli"
INSPECTOR_VERSION="1.0.3"
MANIFEST="$(cd "$(dirname "$0")" && pwd)/mcp-inspector"
INSTALL="$SO_STATE_DIR/mcp-inspector/$INSPECTOR_VERSION"
WRAPPER="$INSTALL/bin/mcp-inspector-cli"
CLIENT="node_modules/$INSPECTOR_PACKAGE/build/index.js"

if [ "${1:-}" = --dir ]; then
    echo "$INSTALL"
    exit 0
fi

NODE="$(bash "$(dirname "$0")/ci-externals.sh" | tail -n1)/node20/bin/node"
[ -x "$NODE" ] || so_die "scripts/ci-externals.sh gave no node at $NODE"

# the wrapper as it should read for this install directory and this node
wrapper_text() {
    printf '#!/usr/bin/env bash\n# %s@%s (scripts/mcp-inspector.sh)\nexec %q %q "$@"\n' \
        "$INSPECTOR_PACKAGE" "$INSPECTOR_VERSION" "$NODE" "$1/$CLIENT"
}

ready() {
    [ -x "$WRAPPER" ] && [ -f "$INSTALL/$CLIENT" ] \
        && cmp -s "$MANIFEST/package-lock.json" "$INSTALL/package-lock.json" \
        && [ "$(cat "$WRAPPER")" = "$(wrapper_text "$INSTALL")" ]
}

mkdir -p "$SO_STATE_DIR/mcp-inspector"
exec 8>"$SO_STATE_DIR/mcp-inspector/install.lock"
flock -w 600 8 || so_die "timed out waiting for $SO_STATE_DIR/mcp-inspector/install.lock"

if ! ready; then
    command -v npm >/dev/null || so_die "npm is required (it installs $INSPECTOR_PACKAGE@$INSPECTOR_VERSION)"
    grep -qF "\"$INSPECTOR_PACKAGE\": \"$INSPECTOR_VERSION\"" "$MANIFEST/package.json" \
        || so_die "$MANIFEST/package.json does not pin $INSPECTOR_PACKAGE $INSPECTOR_VERSION"
    # an install that died halfway (the lock is ours: nobody else's is under way)
    rm -rf "$SO_STATE_DIR/mcp-inspector"/.new-*
    staging="$(mktemp -d "$SO_STATE_DIR/mcp-inspector/.new-XXXXXX")"
    trap 'rm -rf "$staging"' EXIT
    so_say "installing $INSPECTOR_PACKAGE@$INSPECTOR_VERSION (npm ci, node $("$NODE" --version))"
    cp "$MANIFEST/package.json" "$MANIFEST/package-lock.json" "$staging/"
    (cd "$staging" && PATH="$(dirname "$NODE"):$PATH" npm ci --engine-strict --ignore-scripts --no-audit --no-fund \
        --loglevel=error >&2) || so_die "npm ci of $INSPECTOR_PACKAGE@$INSPECTOR_VERSION failed"
    got="$(cd "$staging" && "$NODE" -p "require('./node_modules/$INSPECTOR_PACKAGE/package.json').version")"
    [ "$got" = "$INSPECTOR_VERSION" ] || so_die "npm installed $INSPECTOR_PACKAGE $got, not $INSPECTOR_VERSION"
    printf '{"name": "%s", "version": "%s"}\n' "$INSPECTOR_PACKAGE" "$INSPECTOR_VERSION" \
        >"$staging/node_modules/@modelcontextprotocol/package.json"
    mkdir "$staging/bin"
    wrapper_text "$INSTALL" >"$staging/bin/mcp-inspector-cli"
    chmod 755 "$staging/bin/mcp-inspector-cli"
    chmod -R a+rX,go-w "$staging"
    rm -rf "$INSTALL"
    mv "$staging" "$INSTALL"
    ready || so_die "$WRAPPER is not $INSPECTOR_PACKAGE@$INSPECTOR_VERSION after installing it"
fi
echo "$WRAPPER"
