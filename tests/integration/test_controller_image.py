"""The controller image (`make image`): built on the project's own base without a registry, it runs as a
non-root user on a read-only root filesystem with only /tmp and the state dir writable, carries a
working sandboxctl with this checkout's built-in profiles and a default config, names the sandbox
images it launches, reaches the engine through a mounted socket, and declares a HEALTHCHECK the engine
runs."""

from __future__ import annotations

import json
import urllib.request

import pytest

from orchestrator.profiles import ProfileRegistry
from tests.support.controller import (
    CONFIG,
    IMAGE,
    PORT,
    REPO,
    STATE_DIR,
    UID,
    Controllers,
    engine_client,
    free_port,
    health_test,
    version,
)

pytestmark = pytest.mark.integration

SLEEP = ["sleep", "infinity"]
BASE_IMAGE = "sandbox-orchestrator/base:bookworm"
LABELS = "org.sandbox-orchestrator"

# What a controller may and may not write, and what the kernel says about its root filesystem.
WRITE_PROBE = f"""
import errno, json, os
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
st = os.stat("{STATE_DIR}")
print(json.dumps({{
    "root_read_only": bool(os.statvfs("/").f_flag & os.ST_RDONLY),
    "root": write("/probe"),
    "venv": write("/opt/sandbox-orchestrator/probe"),
    "tmp": write("/tmp/probe"),
    "state": write("{STATE_DIR}/probe"),
    "state_owner_mode": [st.st_uid, oct(st.st_mode & 0o7777)],
}}))
"""

# A stand-in for the service's /healthz, to run the image's HEALTHCHECK against.
HEALTHZ_STUB = """
import http.server, sys
class Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Healthz).serve_forever()
"""


def test_image_config(controller_image: str) -> None:
    client = engine_client()
    try:
        image = client.images.get(controller_image)
        latest = client.images.get(f"{IMAGE}:latest")
        base = client.images.get(BASE_IMAGE)
    finally:
        client.close()
    config = image.attrs["Config"]
    assert latest.id == image.id
    # Built on the bootstrapped base (one imported layer), nothing pulled.
    assert image.attrs["RootFS"]["Layers"][0] == base.attrs["RootFS"]["Layers"][0]
    labels = config["Labels"]
    assert labels[f"{LABELS}.image"] == "controller"
    assert labels[f"{LABELS}.version"] == version()
    assert labels[f"{LABELS}.base-image-id"] == base.id
    assert set(labels[f"{LABELS}.sandbox-images"].split(",")) == {
        f"sandbox-orchestrator/{d.name}:latest" for d in (REPO / "images").iterdir() if (d / "Dockerfile").is_file()
    }
    assert config["User"] == f"{UID}:{UID}"
    assert config["Healthcheck"]["Test"] == health_test(PORT)
    assert config["Cmd"] == ["sandboxctl", "serve", "--host", "0.0.0.0", "--port", str(PORT), "--config", CONFIG]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["SANDBOX_STATE_DIR"] == STATE_DIR
    assert env["DOCKER_HOST"] == "unix:///var/run/docker.sock"


@pytest.mark.parametrize("state_volume", [False, True], ids=["state-tmpfs", "state-volume"])
def test_runs_as_non_root_on_a_read_only_root(controllers: Controllers, state_volume: bool) -> None:
    controller = controllers.start(SLEEP, state_volume=state_volume)
    code, status = controller.exec("cat", "/proc/1/status")
    assert code == 0
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert uids == [str(UID)] * 4  # real, effective, saved, filesystem
    assert controller.exec("id", "-u") == (0, f"{UID}\n")
    code, out = controller.exec("python3", "-c", WRITE_PROBE)
    assert code == 0, out
    # A fresh volume takes the image's state dir with its owner and mode; the tmpfs is mounted so.
    assert json.loads(out) == {
        "root_read_only": True,
        "root": "EROFS",
        "venv": "EROFS",
        "tmp": "ok",
        "state": "ok",
        "state_owner_mode": [UID, "0o700"],
    }


def test_sandboxctl_and_its_config(controllers: Controllers) -> None:
    controller = controllers.start(SLEEP)
    code, out = controller.exec("sandboxctl", "--help")
    assert code == 0
    assert out.startswith("usage: sandboxctl")
    assert controller.exec("sandboxctl", "--version") == (0, f"sandboxctl {version()}\n")
    # The baked config loads, and the gate (tree-sitter and all) decides with it on a read-only root.
    code, out = controller.exec("sandboxctl", "check", "--config", CONFIG, "--json", "--", "ls", "-la")
    assert code == 0, out
    decision = json.loads(out)
    assert (decision["decision"], decision["matched_rule"]) == ("allow", "allowlist:ls")


def test_builtin_profiles_are_this_checkouts(controller_image: str, controllers: Controllers) -> None:
    controller = controllers.start(SLEEP)
    code, out = controller.exec("sandboxctl", "profiles", "list", "--json")
    assert code == 0, out
    listed = {row["name"]: row["image"] for row in json.loads(out)}
    registry = ProfileRegistry()
    assert set(listed) == set(registry.names()) == {"ci", "read-only", "untrusted", "workspace-write"}
    client = engine_client()
    try:
        promised = client.images.get(controller_image).labels[f"{LABELS}.sandbox-images"].split(",")
    finally:
        client.close()
    assert set(listed.values()) <= set(promised)
    for name in listed:
        code, out = controller.exec("sandboxctl", "profiles", "show", name, "--resolved", "--json")
        assert code == 0, out
        # Same files, seccomp profile included, as the checkout's.
        assert json.loads(out)["profile_hash"] == registry.resolve(registry.get(name)).profile_hash


def test_reaches_the_engine_through_its_socket(controllers: Controllers) -> None:
    controller = controllers.start(SLEEP, engine=True)
    code, out = controller.exec("sandboxctl", "doctor", "--no-probe", "--json")
    checks = {check["name"]: check for check in json.loads(out)["checks"]}
    assert code == (0 if all(check["ok"] for check in checks.values()) else 1)
    assert checks["engine"]["ok"], checks["engine"]
    assert "at unix:///var/run/docker.sock" in checks["engine"]["detail"]
    images = [check for name, check in checks.items() if name.startswith("image ")]
    assert images
    assert all(check["ok"] for check in images), images


def test_healthcheck_on_a_host_port(controllers: Controllers) -> None:
    port = free_port()
    stub = ["/usr/bin/python3", "-c", HEALTHZ_STUB, str(port)]
    controller = controllers.start(stub, port=port, health_interval_s=0.5)
    controller.wait_health("healthy")
    assert controller.base_url == f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{controller.base_url}/healthz", timeout=5) as response:
        assert response.status == 200


def test_healthcheck_fails_without_the_service(controllers: Controllers) -> None:
    controller = controllers.start(SLEEP, health_interval_s=0.3)
    controller.wait_health("unhealthy")
