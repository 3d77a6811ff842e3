#!/usr/bin/env bash
# Builds the sandbox images without any registry (called by setup.sh; can be run on its own).
#
#   1. sandbox-orchestrator/base:bookworm — `debootstrap --variant=minbase bookworm` from the Debian
#      mirror in the host's apt sources, imported with `docker import`. Skipped when it exists.
#   2. sandbox-orchestrator/<name>:latest for every images/<name>/Dockerfile (FROM the base),
#      built with `docker build --network host` (the engine has no default bridge). Skipped when the
#      image exists and carries the same Dockerfile hash, build-context hash and base image id.
#      The context is images/<name> plus sandbox-init, the init of pre-started sandboxes, compiled
#      here from images/init/sandbox-init.c (static; its source is part of the context hash).
#
# Engine: $DOCKER_HOST, else the one recorded by setup.sh in $SANDBOX_STATE_DIR/docker-host.
# Knobs: SANDBOX_REBUILD_IMAGES=1 rebuilds the Dockerfile images without the layer cache (picks up
# new Debian security updates); SANDBOX_REBUILD_BASE=1 also
# re-bootstraps the base (and therefore rebuilds everything). Arguments: image names to limit
# the Dockerfile builds to (default: all of images/*/).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

REPO_DIR="$(cd "$SCRIPT_DIR/.." && pwd)"
IMAGES_DIR="$REPO_DIR/images"

so_use_engine

BUILD_TMP="$(mktemp -d "${TMPDIR:-/tmp}/sandbox-images.XXXXXX")"
ROOTFS=""

unmount_below() {
    # debootstrap mounts /proc and /sys in the target; a failed run can leave them behind.
    local dir="$1" m
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r \
        | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

cleanup() {
    if [ -n "$ROOTFS" ] && [ -d "$ROOTFS" ]; then
        unmount_below "$ROOTFS"
        rm -rf --one-file-system "$ROOTFS"
    fi
    rm -rf "$BUILD_TMP"
}
trap cleanup EXIT

ensure_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || so_die "debootstrap is not installed and installing it needs root"
    so_say "installing debootstrap"
    if [ "${SO_APT_UPDATED:-0}" != 1 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get -q update >/dev/null 2>&1 || so_warn "apt-get update reported errors"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends debootstrap \
        >"$BUILD_TMP/apt.log" 2>&1 || { tail -n 20 "$BUILD_TMP/apt.log" >&2; so_die "apt-get install debootstrap failed"; }
}

build_base() {
    if so_image_exists "$SO_BASE_IMAGE" && [ "${SANDBOX_REBUILD_BASE:-0}" != 1 ]; then
        return 0
    fi
    [ "$(id -u)" = 0 ] || so_die "bootstrapping $SO_BASE_IMAGE needs root (debootstrap): run 'sudo make setup'"
    ensure_debootstrap
    local mirror security started
    mirror="$(so_debian_mirror)" || so_die "no Debian mirror found in /etc/apt/sources.list{,.d}; set SANDBOX_DEBIAN_MIRROR"
    security="$(so_debian_security_mirror || true)"
    started=$(date +%s)
    mkdir -p "$SO_STATE_DIR/tmp"
    ROOTFS="$(mktemp -d "$SO_STATE_DIR/tmp/rootfs.XXXXXX")"
    so_say "debootstrap --variant=minbase bookworm (mirror from host apt sources) into $ROOTFS"
    if ! debootstrap --variant=minbase --components=main bookworm "$ROOTFS" "$mirror" \
        >"$BUILD_TMP/debootstrap.log" 2>&1; then
        tail -n 30 "$BUILD_TMP/debootstrap.log" >&2
        [ -r "$ROOTFS/debootstrap/debootstrap.log" ] && tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2
        so_die "debootstrap failed"
    fi
    unmount_below "$ROOTFS"
    # apt sources inside the image: the release, its updates and (when the host has one) security.
    {
        printf 'deb %s bookworm main\n' "$mirror"
        printf 'deb %s bookworm-updates main\n' "$mirror"
        if [ -n "$security" ]; then printf 'deb %s bookworm-security main\n' "$security"; fi
    } >"$ROOTFS/etc/apt/sources.list"
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin
    rm -f "$ROOTFS/etc/hostname" "$ROOTFS/etc/resolv.conf"
    : >"$ROOTFS/etc/resolv.conf"
    so_say "importing $SO_BASE_IMAGE"
    tar --numeric-owner -C "$ROOTFS" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . \
        | docker import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "LABEL $SO_LABEL_NS.image=base $SO_LABEL_NS.suite=bookworm $SO_LABEL_NS.variant=minbase" \
            --change 'CMD ["/bin/bash"]' \
            --message "debootstrap --variant=minbase bookworm" \
            - "$SO_BASE_IMAGE" >/dev/null
    unmount_below "$ROOTFS"
    rm -rf --one-file-system "$ROOTFS"
    ROOTFS=""
    so_say "built $SO_BASE_IMAGE in $(( $(date +%s) - started ))s"
}

INIT_SOURCE="$IMAGES_DIR/init/sandbox-init.c"
INIT_FLAGS=(-static -Os -s -Wall -Wextra -Werror -Wconversion)  # tests/unit/test_sandbox_init.py: the same

build_init() {
    command -v gcc >/dev/null 2>&1 || so_die "gcc is needed for images/init/sandbox-init.c (make setup installs it)"
    gcc "${INIT_FLAGS[@]}" -o "$BUILD_TMP/sandbox-init" "$INIT_SOURCE" || so_die "compiling sandbox-init failed"
}

build_one() {
    local dir="$1" name tag df_sha ctx_sha base_id started context
    name="$(basename "$dir")"
    tag="$(so_sandbox_image "$name")"
    df_sha="$(sha256sum "$dir/Dockerfile" | cut -d' ' -f1)"
    ctx_sha="$( { so_tree_sha "$dir" .; sha256sum "$INIT_SOURCE" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1)"
    base_id="$(docker image inspect --format '{{.Id}}' "$SO_BASE_IMAGE")"
    if [ "${SANDBOX_REBUILD_IMAGES:-0}" != 1 ] && so_image_exists "$tag" \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.dockerfile-sha256")" = "$df_sha" ] \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.context-sha256")" = "$ctx_sha" ] \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.base-image-id")" = "$base_id" ]; then
        so_say "image $tag is up to date"
        return 0
    fi
    started=$(date +%s)
    [ -e "$BUILD_TMP/sandbox-init" ] || build_init
    context="$BUILD_TMP/context-$name"
    mkdir -p "$context"
    cp -a "$dir/." "$context/"
    install -m 0755 "$BUILD_TMP/sandbox-init" "$context/sandbox-init"
    local cache=()
    # A forced rebuild is a real one (fresh apt-get upgrade), not a layer-cache replay.
    [ "${SANDBOX_REBUILD_IMAGES:-0}" = 1 ] && cache=(--no-cache)
    so_say "building $tag from images/$name/Dockerfile"
    if ! docker build --network host --pull=false --rm --force-rm "${cache[@]}" \
        --label "$SO_LABEL_NS.image=$name" \
        --label "$SO_LABEL_NS.dockerfile-sha256=$df_sha" \
        --label "$SO_LABEL_NS.context-sha256=$ctx_sha" \
        --label "$SO_LABEL_NS.base-image-id=$base_id" \
        -t "$tag" "$context" >"$BUILD_TMP/build-$name.log" 2>&1; then
        tail -n 40 "$BUILD_TMP/build-$name.log" >&2
        so_die "docker build of $tag failed"
    fi
    so_say "built $tag in $(( $(date +%s) - started ))s"
    BUILT_ANY=1
}

main() {
    local names=("$@") dirs=() d
    if [ "${#names[@]}" = 0 ]; then
        for d in "$IMAGES_DIR"/*/; do
            [ -f "$d/Dockerfile" ] && dirs+=("${d%/}")
        done
    else
        for d in "${names[@]}"; do
            [ -f "$IMAGES_DIR/$d/Dockerfile" ] || so_die "no images/$d/Dockerfile"
            dirs+=("$IMAGES_DIR/$d")
        done
    fi
    BUILT_ANY=0
    build_base
    for d in "${dirs[@]}"; do build_one "$d"; done
    if [ "$BUILT_ANY" = 1 ]; then
        # Old builds of our images that lost their tag.
        docker image prune -f --filter "label=$SO_LABEL_NS.image" >/dev/null 2>&1 || true
    fi
}

main "$@"
