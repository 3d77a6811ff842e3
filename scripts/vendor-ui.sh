#!/usr/bin/env bash
# Re-fetches the profiles page's charting library from the npm registry, exactly the version the package ships,
# and checks it against the sha256 sums written here (and in orchestrator/api/ui/vendor/README.md):
#
#   scripts/vendor-ui.sh           # compare: exit 1 when a fetched file differs from the committed one
#   scripts/vendor-ui.sh --write   # (re)write the committed files from the checked tarball
#
# The committed files are what ships (no build step, no CDN); this only proves where they came from.
# Needs npm (`npm pack` downloads the tarball, runs no script of it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGE=uplot
VERSION=1.6.32
TARBALL_SHA256=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d
# file in the tarball -> name under orchestrator/api/ui/vendor/, and its sha256
FILES=(
    "package/dist/uPlot.iife.min.js uPlot.iife.min.js 19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f"
    "package/dist/uPlot.min.css uPlot.min.css df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04"
    "package/LICENSE uPlot.LICENSE 8f989229699b4fe2f1a0432d0e9edc338a8a911e250e2d1b01ecd770a5f5b1bd"
)
VENDOR=orchestrator/api/ui/vendor
write=0
[ "${1:-}" = "--write" ] && write=1

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tarball="$work/$PACKAGE-$VERSION.tgz"
echo "$TARBALL_SHA256  $tarball" | sha256sum --check --quiet
tar -xzf "$tarball" -C "$work"

status=0
for entry in "${FILES[@]}"; do
    read -r source name sum <<<"$entry"
    echo "$sum  $work/$source" | sha256sum --check --quiet
    if [ "$write" = 1 ]; then
        install -m 0644 "$work/$source" "$VENDOR/$name"
    elif ! cmp -s "$work/$source" "$VENDOR/$name"; then
        echo "vendor-ui: $VENDOR/$name differs from $PACKAGE@$VERSION's $source" >&2
        status=1
    fi
done
[ "$status" = 0 ] && echo "vendor-ui: $PACKAGE@$VERSION: every file matches its sha256"
exit "$status"
