"""Which images up imports into the cluster's containerd: one stamp per image (its Docker id), containerd's
registry-qualified names, the controller image only when it was built; and the engine it asks."""

from __future__ import annotations

import pytest

from scripts.testcluster import images
from scripts.testcluster.settings import CONTROLLER_IMAGE, PAUSE_IMAGE, SANDBOX_IMAGES, Settings

ENGINE = {ref: f"sha256:{i}" for i, ref in enumerate((PAUSE_IMAGE, *SANDBOX_IMAGES))}


def stamp(s: Settings, ref: str, ident: str) -> None:
    s.image_stamps.mkdir(parents=True, exist_ok=True)
    images.stamp_file(s, ref).write_text(ident + "\n")


def test_containerd_names_images_after_a_registry() -> None:
    listing = ["docker.io/sandbox-orchestrator/minimal:latest", "sandbox-orchestrator/base:bookworm"]
    assert images.containerd_has_image("sandbox-orchestrator/minimal:latest", listing)
    assert images.containerd_has_image("sandbox-orchestrator/base:bookworm", listing)
    assert not images.containerd_has_image("orchestrator/minimal:latest", ["sandbox-orchestrator/minimal:latest"])
    assert not images.containerd_has_image("sandbox-orchestrator/default:latest", listing)


def test_stamp_names(settings: Settings) -> None:
    assert images.stamp_file(settings, "sandbox-orchestrator/k8s-pause:latest") == (
        settings.image_stamps / "sandbox-orchestrator_k8s-pause_latest.id"
    )


def test_everything_is_imported_the_first_time(settings: Settings) -> None:
    assert [ref for ref, _ in images.wanted(settings, ENGINE, [])] == [PAUSE_IMAGE, *SANDBOX_IMAGES]


def test_only_what_changed_or_went_missing(settings: Settings) -> None:
    present = [f"docker.io/{ref}" for ref in ENGINE]
    for ref, ident in ENGINE.items():
        stamp(settings, ref, ident)
    assert images.wanted(settings, ENGINE, present) == []
    changed = {**ENGINE, SANDBOX_IMAGES[1]: "sha256:new"}
    assert images.wanted(settings, changed, present) == [(SANDBOX_IMAGES[1], "sha256:new")]
    assert images.wanted(settings, ENGINE, present[1:]) == [(PAUSE_IMAGE, ENGINE[PAUSE_IMAGE])]


def test_the_controller_image_only_when_built(settings: Settings) -> None:
    engine = {**ENGINE, CONTROLLER_IMAGE: "sha256:c"}
    present = [f"docker.io/{ref}" for ref in ENGINE]
    for ref, ident in ENGINE.items():
        stamp(settings, ref, ident)
    assert images.wanted(settings, ENGINE, present) == []
    assert images.wanted(settings, engine, present) == [(CONTROLLER_IMAGE, "sha256:c")]


def test_a_sandbox_image_missing_from_the_engine(settings: Settings) -> None:
    engine = {k: v for k, v in ENGINE.items() if k != SANDBOX_IMAGES[0]}
    with pytest.raises(images.ImageError, match="is not on the Docker engine: run make setup"):
        images.wanted(settings, engine, [])


def test_the_engine_setup_recorded(settings: Settings) -> None:
    assert "DOCKER_HOST" not in images.docker_env(settings, {})
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    settings.docker_host_file.write_text("unix:///run/sandbox-orchestrator/docker.sock\n")
    env = images.docker_env(settings, {"PATH": "/bin"})
    assert env == {
        "PATH": "/bin",
        "DOCKER_HOST": "unix:///run/sandbox-orchestrator/docker.sock",
        "DOCKER_BUILDKIT": "0",
    }
    assert images.docker_env(settings, {"DOCKER_HOST": "unix:///x.sock"})["DOCKER_HOST"] == "unix:///x.sock"


def test_seccomp_profiles_are_installed_and_kept_in_step(settings: Settings) -> None:
    images.ensure_seccomp_profiles(settings)
    sources = sorted(p.name for p in settings.seccomp_sources.glob("*.json"))
    assert sources and sorted(p.name for p in settings.seccomp_dir.iterdir()) == sources
    target = settings.seccomp_dir / sources[0]
    target.write_text("{}")
    images.ensure_seccomp_profiles(settings)
    assert target.read_bytes() == (settings.seccomp_sources / sources[0]).read_bytes()


def test_the_pause_image_sleeps_as_nobody() -> None:
    assert images.PAUSE_DOCKERFILE.splitlines() == [
        "FROM sandbox-orchestrator/base:bookworm",
        "USER 65535:65535",
        'CMD ["sleep", "infinity"]',
    ]


def test_ctr_speaks_to_the_clusters_containerd(settings: Settings) -> None:
    assert images.ctr(settings, "images", "ls") == [
        "ctr", "--address", str(settings.containerd_socket), "--namespace", "k8s.io", "images", "ls",
    ]  # fmt: skip
