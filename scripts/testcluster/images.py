"""What pods need on the node: the project's images, copied from the Docker engine into the cluster's
containerd (``docker save | ctr import``, never a pull), the pod sandbox ("pause") image built from the base
image, and the project's seccomp profiles installed as the kubelet's Localhost profiles.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import supervise
from .settings import BASE_IMAGE, CONTROLLER_IMAGE, LABEL_NS, PAUSE_IMAGE, SANDBOX_IMAGES, Settings

DOCKER_TIMEOUT_S = 20
PAUSE_DOCKERFILE = f'FROM {BASE_IMAGE}\nUSER 65535:65535\nCMD ["sleep", "infinity"]\n'
BASE_ID_LABEL = f"{LABEL_NS}.base-image-id"


class ImageError(RuntimeError):
    pass


def docker_env(s: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """DOCKER_HOST for the engine scripts/setup.sh recorded (unless already set); the legacy builder (no
    BuildKit frontend image to fetch)."""
    env = dict(os.environ if environ is None else environ)
    if not env.get("DOCKER_HOST"):
        try:
            recorded = s.docker_host_file.read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            recorded = ""
        if recorded:
            env["DOCKER_HOST"] = recorded
    env["DOCKER_BUILDKIT"] = "0"
    return env


def docker(s: Settings, *args: str, input: str | None = None, timeout: float | None = DOCKER_TIMEOUT_S) -> str:
    try:
        proc = subprocess.run(
            ["docker", *args],
            capture_output=True,
            text=True,
            input=input,
            env=docker_env(s),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"docker {' '.join(args[:2])} did not answer in {timeout:g} s") from exc
    if proc.returncode != 0:
        raise ImageError(f"docker {' '.join(args[:2])} failed: {proc.stderr.strip()[-1000:]}")
    return proc.stdout


def ctr(s: Settings, *args: str) -> list[str]:
    return ["ctr", "--address", str(s.containerd_socket), "--namespace", "k8s.io", *args]


def use_engine(s: Settings) -> None:
    if shutil.which("docker") is None:
        raise ImageError("docker CLI not found; run scripts/setup.sh")
    try:
        docker(s, "version", "--format", "{{.Server.Version}}")
    except ImageError as exc:
        raise ImageError(f"no engine answers (run scripts/setup.sh first): {exc}") from exc


def image_id(s: Settings, ref: str) -> str | None:
    try:
        return docker(s, "image", "inspect", "--format", "{{.Id}}", ref).strip() or None
    except ImageError:
        return None


def ensure_pause_image(s: Settings) -> None:
    """The pod sandbox image: the base image, an unprivileged user, ``sleep infinity``. Rebuilt (in about a
    second, nothing fetched) only when the base image changed."""
    base_id = image_id(s, BASE_IMAGE)
    if base_id is None:
        raise ImageError(f"{BASE_IMAGE} is not on the Docker engine: run make setup")
    try:
        label = docker(
            s, "image", "inspect", "--format", f'{{{{index .Config.Labels "{BASE_ID_LABEL}"}}}}', PAUSE_IMAGE
        )
    except ImageError:
        label = ""
    if label.strip() == base_id:
        return
    supervise.say(f"building {PAUSE_IMAGE} (the pod sandbox image)")
    log = s.log_file("pause-image")
    proc = subprocess.run(
        ["docker", "build", "-q", "--label", f"{BASE_ID_LABEL}={base_id}", "--label", f"{LABEL_NS}.image=k8s-pause",
         "-t", PAUSE_IMAGE, "-"],
        input=PAUSE_DOCKERFILE, capture_output=True, text=True, env=docker_env(s), check=False,
    )  # fmt: skip
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise ImageError(f"could not build {PAUSE_IMAGE}:\n{proc.stdout}{proc.stderr}")


def containerd_has_image(ref: str, listing: Sequence[str]) -> bool:
    """containerd names an imported image after the registry it would come from: match the repository path."""
    return any(line == ref or line.endswith("/" + ref) for line in listing)


def stamp_file(s: Settings, ref: str) -> Path:
    return s.image_stamps / (ref.replace("/", "_").replace(":", "_") + ".id")


def engine_listing(s: Settings) -> dict[str, str]:
    """ref -> Docker id of every tagged image on the engine."""
    out = docker(s, "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    listing: dict[str, str] = {}
    for line in out.splitlines():
        ref, _, ident = line.partition(" ")
        listing.setdefault(ref, ident)
    return listing


def wanted(s: Settings, engine: Mapping[str, str], present: Sequence[str]) -> list[tuple[str, str]]:
    """(ref, Docker id) of every image to import: its id changed since its import (a stamp per image) or
    containerd no longer has it; the controller image only when `make image` built it."""
    out = []
    for ref in (PAUSE_IMAGE, *SANDBOX_IMAGES, CONTROLLER_IMAGE):
        ident = engine.get(ref)
        if ident is None:
            if ref == CONTROLLER_IMAGE:
                continue
            raise ImageError(f"{ref} is not on the Docker engine: run make setup")
        try:
            stamped = stamp_file(s, ref).read_text().strip()
        except OSError:
            stamped = ""
        if stamped == ident and containerd_has_image(ref, present):
            continue
        out.append((ref, ident))
    return out


def ensure_images(s: Settings) -> None:
    use_engine(s)
    ensure_pause_image(s)
    s.image_stamps.mkdir(parents=True, exist_ok=True)
    listed = subprocess.run(ctr(s, "images", "ls", "-q"), capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        raise ImageError(f"ctr images ls failed: {listed.stderr.strip()}")
    todo = wanted(s, engine_listing(s), listed.stdout.splitlines())
    if not todo:
        return
    refs = [ref for ref, _ in todo]
    supervise.say(f"importing {' '.join(refs)} into the cluster's containerd")
    save = subprocess.Popen(["docker", "save", *refs], stdout=subprocess.PIPE, env=docker_env(s))
    assert save.stdout is not None
    imported = subprocess.run(ctr(s, "images", "import", "-"), stdin=save.stdout, capture_output=True, check=False)
    save.stdout.close()
    if save.wait() != 0 or imported.returncode != 0:
        raise ImageError(f"docker save | ctr images import failed: {imported.stderr.decode(errors='replace')[-1000:]}")
    for ref, ident in todo:
        stamp_file(s, ref).write_text(ident + "\n")


def ensure_seccomp_profiles(s: Settings) -> None:
    """Pods name them as localhostProfile: sandbox-orchestrator/<file>."""
    s.seccomp_dir.mkdir(parents=True, exist_ok=True)
    for source in sorted(s.seccomp_sources.glob("*.json")):
        target = s.seccomp_dir / source.name
        if not target.exists() or not filecmp.cmp(source, target, shallow=False):
            shutil.copyfile(source, target)
            target.chmod(0o644)
