"""The one backend contract: both backends have every method of it, say what they can do as data, mark their
sandboxes with the one label set and name, apply the one /tmp rule; a launch no backend runs cannot be built."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from orchestrator.backends._support.host_paths import ENGINE_STATE
from orchestrator.backends._support.labels import NAME_PREFIX, sandbox_labels, sandbox_name
from orchestrator.backends._support.launch_message import MAX_ITEMS
from orchestrator.backends._support.tmp_rule import TMP, needs_empty_tmp
from orchestrator.backends.base import (
    LABEL_DEADLINE,
    LABEL_EXECUTION_ID,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_PROFILE_HASH,
    MANAGED_BY,
    CommandLaunch,
    LaunchKind,
    LaunchSpec,
    PooledLaunch,
    SandboxBackend,
    SessionLaunch,
    Workspace,
)
from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.docker.config import container_config, tmpfs_mounts
from orchestrator.backends.docker.sandbox_etc import etc_directory
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.manifest import label_value, pod_manifest
from orchestrator.backends.kubernetes.settings import KubernetesSettings, WorkspaceDelivery
from orchestrator.domain.errors import InputInvalid
from orchestrator.profiles import ProfileRegistry, ResolvedProfile

ROOT = "/srv/workspaces"
OWNER = "host~pidns4026531836:123:456"
BUILTIN = ProfileRegistry().names()


def spec_for(profile: ResolvedProfile, kind: LaunchKind | None = None, **changes: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "execution_id": "ex-18f0a-0123456789abcdef",
        "argv": ("sh", "-c", "echo hi"),
        "profile": profile,
        "workspace": Workspace(f"{ROOT}/tenant-a/default"),
        "workdir": profile.workspace.container_path,
        "env": {"LANG": "C.UTF-8"},
        "owner": OWNER,
        "deadline_unix": 2_000_000_000.0,
        "kind": kind or CommandLaunch(),
        **changes,
    }
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def kube(mode: str = "pvc") -> KubernetesBackend:
    return KubernetesBackend(KubernetesSettings(workspace=WorkspaceDelivery(root=ROOT, mode=mode)))  # type: ignore[arg-type]


# -- one protocol ------------------------------------------------------------------------------------------


def protocol_members() -> dict[str, inspect.Signature]:
    own = {name for name in vars(SandboxBackend) if not name.startswith("_")}
    return {name: inspect.signature(getattr(SandboxBackend, name)) for name in own if name != "capabilities"}


@pytest.mark.parametrize("backend", [DockerBackend("unix:///nonexistent.sock"), kube()], ids=["docker", "kubernetes"])
def test_every_backend_has_every_method_of_the_contract_as_declared(backend: SandboxBackend) -> None:
    """No optional protocols: what a backend cannot do as configured its capabilities say, not a missing method."""
    assert isinstance(backend, SandboxBackend)
    for name, declared in protocol_members().items():
        implemented = inspect.signature(getattr(type(backend), name))
        assert list(implemented.parameters) == list(declared.parameters), name
        assert inspect.iscoroutinefunction(getattr(type(backend), name)) == inspect.iscoroutinefunction(
            getattr(SandboxBackend, name)
        ), name


def test_capabilities_are_what_each_backend_can_do_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///srv/engine/docker.sock")
    docker = DockerBackend().capabilities
    assert (docker.can_pool, docker.launch_confirmed, docker.sessions) == (True, False, True)
    assert (docker.lists_images, docker.own_pids_limit) == (True, True)
    # its bind mounts would hand a sandbox the engine: its state and its socket's directory
    assert docker.protected_paths == (*ENGINE_STATE, "/srv/engine")
    assert "/var/lib/docker" in docker.protected_paths
    assert DockerBackend("tcp://engine:2375").capabilities.protected_paths == ENGINE_STATE
    pvc, copy = kube("pvc").capabilities, kube("copy").capabilities
    assert (pvc.can_pool, copy.can_pool) == (True, False)  # copy mode copies the workspace in as a pod starts
    assert (pvc.launch_confirmed, pvc.sessions, pvc.lists_images, pvc.own_pids_limit) == (True, True, False, False)
    assert pvc.protected_paths == copy.protected_paths == ENGINE_STATE


def test_egress_needs_a_sandbox_started_waiting_where_the_backend_says_so() -> None:
    """Egress launches its command into a waiting sandbox: the backend that cannot start one gives no egress."""
    profile = ProfileRegistry().resolve("workspace-write")
    copy = kube("copy")
    assert not copy.capabilities.can_pool and copy.egress_problem(profile) is not None


# -- a small sum of launch kinds ---------------------------------------------------------------------------


def test_a_launch_no_backend_runs_cannot_be_built() -> None:
    with pytest.raises(InputInvalid) as refused:
        CommandLaunch(stdin=b"x", tty=True)  # a terminal echoes its input: piped bytes lose their meaning
    assert refused.value.details == {"field": "stdin"}
    with pytest.raises(TypeError):
        SessionLaunch(stdin=b"x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        PooledLaunch(stdin=b"x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        PooledLaunch(tty=True)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kind", "stdin", "tty", "session", "pooled"),
    [
        (CommandLaunch(), None, False, False, False),
        (CommandLaunch(stdin=b"in"), b"in", False, False, False),
        (CommandLaunch(tty=True), None, True, False, False),
        (SessionLaunch(tty=True), None, True, True, False),
        (PooledLaunch(), None, False, False, True),
    ],
)
def test_a_specs_kind_read_plainly(
    kind: LaunchKind, stdin: bytes | None, tty: bool, session: bool, pooled: bool
) -> None:
    spec = spec_for(ProfileRegistry().resolve("workspace-write"), kind)
    assert (spec.stdin, spec.tty, spec.session, spec.pooled) == (stdin, tty, session, pooled)


def test_only_a_command_without_a_terminal_within_a_messages_bounds_fits_a_launch() -> None:
    """A one-shot command or a session's (its input follows the message); never a terminal."""
    profile = ProfileRegistry().resolve("workspace-write")
    for backend in (DockerBackend("unix:///nonexistent.sock"), kube()):
        assert backend.fits_launch(spec_for(profile))
        assert backend.fits_launch(spec_for(profile, CommandLaunch(stdin=b"in")))
        assert backend.fits_launch(spec_for(profile, SessionLaunch()))
        assert not backend.fits_launch(spec_for(profile, CommandLaunch(tty=True)))
        assert not backend.fits_launch(spec_for(profile, SessionLaunch(tty=True)))
        assert not backend.fits_launch(spec_for(profile, PooledLaunch()))
        assert not backend.fits_launch(spec_for(profile, argv=("x",) * (MAX_ITEMS + 1)))


# -- what marks a sandbox as ours, in one place ---------------------------------------------------------------


def test_one_label_set_and_one_name_on_both_backends(tmp_path: Path) -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    spec = spec_for(profile, workspace=Workspace(str(tmp_path)))
    labels = sandbox_labels(
        spec.execution_id, owner=OWNER, deadline_unix=spec.deadline_unix, profile_hash=profile.profile_hash
    )
    assert (
        spec.labels
        == labels
        == {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_EXECUTION_ID: spec.execution_id,
            LABEL_OWNER: OWNER,
            LABEL_DEADLINE: "2000000000",
            LABEL_PROFILE_HASH: profile.profile_hash,
        }
    )
    assert container_config(spec, etc_dir=etc_directory(tmp_path / "state"))["Labels"] == labels
    pod = pod_manifest(spec_for(profile), KubernetesSettings(workspace=WorkspaceDelivery(root=ROOT)))
    # the same set, label-safe: the owner as its hash, each value at most 63 characters
    assert pod["metadata"]["labels"] == {
        **labels,
        LABEL_OWNER: label_value(OWNER),
        LABEL_PROFILE_HASH: profile.profile_hash[:63],
    }
    assert pod["metadata"]["name"] == sandbox_name(spec.execution_id) == NAME_PREFIX + spec.execution_id
    # without an owner no owner label: the orphan collector removes such a sandbox
    assert LABEL_OWNER not in spec_for(profile, owner="").labels


def test_a_pooled_sandboxs_labels_follow_its_pool_id_and_deadline() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    pooled = spec_for(profile, PooledLaunch(), execution_id="ex-pool", deadline_unix=2_000_000_500.0)
    assert pooled.labels[LABEL_EXECUTION_ID] == "ex-pool" and pooled.labels[LABEL_DEADLINE] == "2000000500"
    assert pooled.labels[LABEL_OWNER] == OWNER


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("tmpfs", [True, False])
def test_one_tmp_rule_on_both_backends(name: str, tmpfs: bool) -> None:
    """A read-only root always gets an explicit /tmp: the profile's, or an empty read-only one."""
    profile = ProfileRegistry().resolve(name)
    if not tmpfs:
        profile = profile.model_copy(update={"tmpfs": ()})
    has_own = any(t.path == TMP for t in profile.tmpfs)
    assert needs_empty_tmp(profile) == (profile.read_only_root and not has_own)
    docker = tmpfs_mounts(profile).get(TMP)
    pod = pod_manifest(spec_for(profile), KubernetesSettings(workspace=WorkspaceDelivery(root=ROOT)))
    mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    if needs_empty_tmp(profile):
        assert docker is not None and docker.startswith("ro,")
        assert mounts[TMP]["readOnly"] is True
    elif has_own:
        assert docker is not None and not docker.startswith("ro,")
        assert not mounts[TMP].get("readOnly")
    else:
        assert docker is None and TMP not in mounts
