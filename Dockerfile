# The controller (service) image: sandboxctl and the orchestrator, as a non-root user, made to run
# with a read-only root filesystem. Built by scripts/build-controller.sh (`make image`) FROM the
# locally bootstrapped base (no registry involved), with a context that script assembles:
#   wheels/      the project's wheel, its dependencies and pip: binary wheels fetched on the host for
#                this image's Python, glibc and architecture
#   config.yaml  deploy/controller/config.yaml
#   docker build --network host -f Dockerfile -t sandbox-orchestrator/controller:VERSION CONTEXT
# The network is for apt in the first stage only; pip installs from wheels/ and never looks further.
#
# Run it with writable places and the engine's socket mounted, e.g.:
#   docker run --read-only --tmpfs /tmp \
#     -v so-state:/var/lib/sandbox-orchestrator \
#     -v /run/sandbox-orchestrator/docker.sock:/var/run/docker.sock --group-add SOCKET_GID \
#     -v ./config.yaml:/etc/sandbox-orchestrator/config.yaml:ro \
#     sandbox-orchestrator/controller:latest

# python3 with Debian's fixes (bookworm-updates/-security), the service's user 10001:10001 whose home
# is the state dir, and no setuid/setgid file anywhere.
FROM sandbox-orchestrator/base:bookworm AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends python3 ca-certificates; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt \
           /var/log/dpkg.log /var/log/alternatives.log; \
    groupadd --system --gid 10001 orchestrator; \
    useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/sandbox-orchestrator --no-create-home \
            --shell /usr/sbin/nologin orchestrator; \
    install -d -o 10001 -g 10001 -m 0700 /var/lib/sandbox-orchestrator; \
    find / -xdev -type f \( -perm -4000 -o -perm -2000 \) -exec chmod ug-s {} +; \
    test -z "$(find / -xdev -type f \( -perm -4000 -o -perm -2000 \) -print -quit)"

# The package into a venv, from the wheels only. pip runs from its own wheel and is not installed:
# nothing in the final image can fetch or install Python code. Bytecode is compiled here, since the
# root filesystem will be read-only.
FROM runtime AS install
COPY wheels/ /tmp/wheels/
RUN set -eux; \
    python3 -m venv --without-pip /opt/sandbox-orchestrator; \
    set -- /tmp/wheels/pip-*.whl; \
    /opt/sandbox-orchestrator/bin/python "$1/pip" install --no-index --find-links /tmp/wheels \
        --no-cache-dir --disable-pip-version-check /tmp/wheels/sandbox_orchestrator-*.whl; \
    /opt/sandbox-orchestrator/bin/sandboxctl --version

FROM runtime
COPY --from=install /opt/sandbox-orchestrator /opt/sandbox-orchestrator
COPY config.yaml /etc/sandbox-orchestrator/config.yaml
# DOCKER_HOST: the engine's socket mounted at the usual place (the container is not its host).
ENV PATH=/opt/sandbox-orchestrator/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SANDBOX_STATE_DIR=/var/lib/sandbox-orchestrator \
    HOME=/var/lib/sandbox-orchestrator \
    DOCKER_HOST=unix:///var/run/docker.sock \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8700
# The system python3 with the standard library only (-I: no PYTHON* variables, no user site).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/bin/python3", "-I", "-c", "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:8700/healthz', timeout=4).status != 200)"]
CMD ["sandboxctl", "serve", "--host", "0.0.0.0", "--port", "8700", "--config", "/etc/sandbox-orchestrator/config.yaml"]
