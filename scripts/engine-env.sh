#!/usr/bin/env bash
# Prints `export DOCKER_HOST=...` for the engine scripts/setup.sh chose, or nothing when that is
# the default socket (unix:///var/run/docker.sock). Use it as:
#
#   eval "$(scripts/engine-env.sh)"          # shell
#   eval "$$(scripts/engine-env.sh)" && ...   # in a Makefile recipe
#
# Reads $SANDBOX_STATE_DIR/docker-host (default /var/lib/sandbox-orchestrator/docker-host), written by
# setup.sh. Without that file it falls back to the project-managed socket when it exists.
# Always exits 0; notes go to stderr. Never touches the engine.
set -euo pipefail
SO_LOG_PREFIX=engine-env
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

host=""
if [ -r "$SO_HOST_FILE" ]; then
    host="$(head -n1 "$SO_HOST_FILE")"
elif [ -S "$SO_SOCKET" ]; then
    host="$SO_DOCKER_HOST"
else
    so_say "no engine recorded in $SO_HOST_FILE (run scripts/setup.sh); leaving DOCKER_HOST alone" 
    exit 0
fi

if [ -n "$host" ] && [ "$host" != "$SO_DEFAULT_DOCKER_HOST" ]; then
    printf 'export DOCKER_HOST=%q\n' "$host"
fi
