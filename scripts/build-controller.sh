#!/usr/bin/env bash
# Builds the controller (service) image from the root Dockerfile without any registry (`make image`,
# which runs setup.sh first for the engine and the base image):
#
#   sandbox-orchestrator/controller:<version in pyproject.toml> and :latest
#
# The image's Python packages are wheels fetched here, on the host (the build itself uses the
# network for apt only):
#   - the project's wheel, built from a copy of exactly the files whose hash the image carries;
#   - its dependencies and pip: binary wheels for the image's Python, glibc and architecture, cached
#     in $SANDBOX_STATE_DIR/controller/wheels/<key> (key: the dependency list and those three);
#   - pip itself runs from a private venv, $SANDBOX_STATE_DIR/controller/pip-venv.
# Skipped when the image carries the same Dockerfile, source, base image and sandbox image labels.
#
# Engine: $DOCKER_HOST, else the one recorded by setup.sh. Knobs: SANDBOX_REBUILD_IMAGES=1 rebuilds
# without the layer cache (new Debian fixes) and fetches the wheels again; PYTHON (default python3,
# 3.11+ with venv) makes the pip venv.
set -euo pipefail
SO_LOG_PREFIX=image

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

REPO_DIR="$(cd "$SCRIPT_DIR/.." && pwd)"
IMAGE="$SO_IMAGE_PREFIX/controller"
CACHE_DIR="$SO_STATE_DIR/controller"
CONFIG_DIR=deploy/controller
# What the project's wheel is built from.
WHEEL_SOURCES=(pyproject.toml README.md orchestrator profiles)
REBUILD="${SANDBOX_REBUILD_IMAGES:-0}"

so_use_engine
BUILD_TMP="$(mktemp -d "${TMPDIR:-/tmp}/sandbox-controller.XXXXXX")"
trap 'rm -rf "$BUILD_TMP"' EXIT

project_field() {
    "${PYTHON:-python3}" - "$REPO_DIR/pyproject.toml" "$1" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    value = tomllib.load(f)["project"][sys.argv[2]]
print("\n".join(value) if isinstance(value, list) else value)
EOF
}

# The sandbox images' names, as build-images.sh tags them (the profiles refer to them).
sandbox_images() {
    local d names=()
    for d in "$REPO_DIR"/images/*/; do
        [ -f "$d/Dockerfile" ] && names+=("$(so_sandbox_image "$(basename "$d")")")
    done
    (IFS=,; printf '%s\n' "${names[*]}")
}

# PIP_PY: the host side's pip, in a venv of its own (Debian's python3 comes without pip, and the
# project's .venv belongs to the developer).
pip_python() {
    local venv="$CACHE_DIR/pip-venv"
    if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        so_say "creating $venv for the host-side pip"
        rm -rf "$venv"
        mkdir -p "$CACHE_DIR"
        "${PYTHON:-python3}" -m venv "$venv" >"$BUILD_TMP/venv.log" 2>&1 \
            || { cat "$BUILD_TMP/venv.log" >&2; so_die "${PYTHON:-python3} -m venv failed (needs Python 3.11+ with venv)"; }
        # The same pip whatever the host's Python shipped (bookworm's is 23.0).
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >"$BUILD_TMP/venv.log" 2>&1 \
            || { cat "$BUILD_TMP/venv.log" >&2; so_die "upgrading pip in $venv failed"; }
    fi
    PIP_PY="$venv/bin/python"
}

# pip's --platform list for a glibc on an architecture: every manylinux_2_N down to the oldest
# policy there is for it, with the legacy aliases (pip widens a given --platform no further).
platform_args() {
    local arch="$1" minor="${2#2.}" lowest=17
    case "$minor" in ''|*[!0-9]*) so_die "unexpected glibc version '$2' in the image" ;; esac
    case "$arch" in x86_64|i686) lowest=5 ;; esac
    for (( ; minor >= lowest; minor--)); do
        printf -- '--platform=manylinux_2_%s_%s\n' "$minor" "$arch"
        case "$minor" in
            17) printf -- '--platform=manylinux2014_%s\n' "$arch" ;;
            12) printf -- '--platform=manylinux2010_%s\n' "$arch" ;;
            5) printf -- '--platform=manylinux1_%s\n' "$arch" ;;
        esac
    done
}

# WHEELS_DIR: binary wheels of the dependencies and of pip for the interpreter of image $1.
dependency_wheels() {
    local runtime_id="$1" facts arch glibc pyver reqs key dir started plats=()
    facts="$(docker run --rm --network none --read-only "$runtime_id" python3 -I -c \
        'import platform, sys; print(platform.machine(), platform.libc_ver()[1], "%d.%d" % sys.version_info[:2])')" \
        || so_die "could not run python3 in the image's first stage"
    read -r arch glibc pyver <<<"$facts"
    reqs="$BUILD_TMP/requirements.txt"
    { project_field dependencies; echo pip; } >"$reqs"
    key="$( { cat "$reqs"; echo "$facts"; } | sha256sum | cut -c1-16)"
    WHEELS_DIR="$CACHE_DIR/wheels/$key"
    dir="$WHEELS_DIR"
    if [ -d "$dir" ] && [ "$REBUILD" != 1 ]; then
        return 0
    fi
    started=$(date +%s)
    so_say "fetching wheels for python $pyver, glibc $glibc, $arch into $dir"
    mapfile -t plats < <(platform_args "$arch" "$glibc")
    rm -rf "$dir.tmp"
    if ! "$PIP_PY" -m pip download -q --disable-pip-version-check --dest "$dir.tmp" --only-binary=:all: \
        --implementation cp --python-version "$pyver" --abi "cp${pyver/./}" "${plats[@]}" \
        -r "$reqs" >"$BUILD_TMP/download.log" 2>&1; then
        tail -n 30 "$BUILD_TMP/download.log" >&2
        so_die "pip download of the dependencies failed"
    fi
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    # Only the current set is kept.
    find "$CACHE_DIR/wheels" -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
    so_say "fetched $(find "$dir" -name '*.whl' | wc -l) wheels in $(( $(date +%s) - started ))s"
}

build_project_wheel() {
    local out="$1" src="$BUILD_TMP/src"
    mkdir -p "$src"
    # A copy: a checkout's own build/ or *.egg-info (setuptools reuses them) never reaches the wheel.
    tar -C "$REPO_DIR" --exclude=__pycache__ -cf - "${WHEEL_SOURCES[@]}" | tar -C "$src" -xf -
    if ! "$PIP_PY" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$out" "$src" \
        >"$BUILD_TMP/wheel.log" 2>&1; then
        tail -n 30 "$BUILD_TMP/wheel.log" >&2
        so_die "building the project's wheel failed"
    fi
}

main() {
    local version df_sha src_sha base_id images tag started
    # One build at a time (test workers side by side, two `make image`): the next waits, then finds the image
    # up to date instead of building it again (and no build's prune meets another's image half-made).
    mkdir -p "$CACHE_DIR"
    exec 9>"$CACHE_DIR/build.lock"
    flock 9
    so_image_exists "$SO_BASE_IMAGE" || so_die "$SO_BASE_IMAGE is missing: run scripts/setup.sh (make setup) first"
    version="$(project_field version)"
    tag="$IMAGE:$version"
    df_sha="$(sha256sum "$REPO_DIR/Dockerfile" | cut -d' ' -f1)"
    src_sha="$(so_tree_sha "$REPO_DIR" "${WHEEL_SOURCES[@]}" "$CONFIG_DIR")"
    base_id="$(docker image inspect --format '{{.Id}}' "$SO_BASE_IMAGE")"
    images="$(sandbox_images)"
    if [ "$REBUILD" != 1 ] && so_image_exists "$tag" \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.dockerfile-sha256")" = "$df_sha" ] \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.source-sha256")" = "$src_sha" ] \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.base-image-id")" = "$base_id" ] \
        && [ "$(so_image_label "$tag" "$SO_LABEL_NS.sandbox-images")" = "$images" ]; then
        docker tag "$tag" "$IMAGE:latest"
        so_say "image $tag is up to date"
        return 0
    fi
    started=$(date +%s)
    local cache=()
    # A forced rebuild is a real one (fresh apt-get upgrade), not a layer-cache replay.
    [ "$REBUILD" = 1 ] && cache=(--no-cache)
    # The first stage on its own: its interpreter decides which wheels fit.
    mkdir -p "$BUILD_TMP/empty" "$BUILD_TMP/context/wheels"
    so_say "building the python3 stage of $tag"
    if ! docker build --network host --pull=false --rm --force-rm "${cache[@]}" --target runtime \
        --iidfile "$BUILD_TMP/runtime.id" -f "$REPO_DIR/Dockerfile" "$BUILD_TMP/empty" \
        >"$BUILD_TMP/build-runtime.log" 2>&1; then
        tail -n 40 "$BUILD_TMP/build-runtime.log" >&2
        so_die "docker build of the python3 stage failed"
    fi
    pip_python
    dependency_wheels "$(cat "$BUILD_TMP/runtime.id")"
    cp "$WHEELS_DIR"/*.whl "$BUILD_TMP/context/wheels/"
    build_project_wheel "$BUILD_TMP/context/wheels"
    cp "$REPO_DIR/$CONFIG_DIR/config.yaml" "$BUILD_TMP/context/config.yaml"
    so_say "building $tag"
    # The first stage comes from the layer cache the build above refreshed.
    if ! docker build --network host --pull=false --rm --force-rm \
        --label "$SO_LABEL_NS.image=controller" \
        --label "$SO_LABEL_NS.version=$version" \
        --label "$SO_LABEL_NS.dockerfile-sha256=$df_sha" \
        --label "$SO_LABEL_NS.source-sha256=$src_sha" \
        --label "$SO_LABEL_NS.base-image-id=$base_id" \
        --label "$SO_LABEL_NS.sandbox-images=$images" \
        --label "org.opencontainers.image.title=sandbox-orchestrator controller" \
        --label "org.opencontainers.image.version=$version" \
        --label "org.opencontainers.image.licenses=Apache-2.0" \
        -t "$tag" -t "$IMAGE:latest" -f "$REPO_DIR/Dockerfile" "$BUILD_TMP/context" \
        >"$BUILD_TMP/build.log" 2>&1; then
        tail -n 40 "$BUILD_TMP/build.log" >&2
        so_die "docker build of $tag failed"
    fi
    # Earlier builds that lost their tag.
    docker image prune -f --filter "label=$SO_LABEL_NS.image=controller" >/dev/null 2>&1 || true
    so_say "built $tag ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%d MB", $1 / 1e6}')) in $(( $(date +%s) - started ))s"
}

main "$@"
