"""The pod manifest of every built-in profile: each hardening setting explicit, nothing weaker."""

from __future__ import annotations

import dataclasses
import math

import pytest

from orchestrator.backends._support.launch_message import INIT_PATH
from orchestrator.backends.base import (
    LABEL_EXECUTION_ID,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    CommandLaunch,
    LaunchSpec,
    PooledLaunch,
    SessionLaunch,
    Workspace,
)
from orchestrator.backends.kubernetes.manifest import (
    ANNOTATION_OWNER,
    API_SERVICE_ENV,
    PROFILE_MAPPING,
    label_value,
    pod_manifest,
    sandbox_argv,
    split_cpu,
)
from orchestrator.backends.kubernetes.settings import KubernetesSettings, WorkspaceDelivery
from orchestrator.domain.errors import InputInvalid, SandboxUnavailable
from orchestrator.profiles import ProfileRegistry, ResolvedProfile
from orchestrator.profiles.models import ResolvedMount

ROOT = "/srv/workspaces"
BUILTIN = ProfileRegistry().names()


def spec_for(profile: ResolvedProfile, **changes: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "execution_id": "ex-18f0a-0123456789abcdef",
        "argv": ("sh", "-c", "echo hi"),
        "profile": profile,
        "workspace": Workspace(f"{ROOT}/tenant-a/default"),
        "workdir": profile.workspace.container_path,
        "env": {"LANG": "C.UTF-8"},
        "owner": "host~pidns4026531836:123:456",
        "deadline_unix": 2_000_000_000.0,
    }
    fields.update(changes)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def settings(**changes: object) -> KubernetesSettings:
    return KubernetesSettings(workspace=WorkspaceDelivery(root=ROOT), **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_profile_is_hardened_in_its_pod(name: str) -> None:
    profile = ProfileRegistry().resolve(name)
    pod = pod_manifest(spec_for(profile), settings(seccomp="localhost"))
    spec = pod["spec"]
    container, sidecar = spec["containers"]
    assert (container["name"], sidecar["name"]) == ("sandbox", "sandbox-io")
    # the sidecar (the stdio relays) runs as hardened as the command, with the pipes' volume only
    assert sidecar["securityContext"] == {**container["securityContext"], "readOnlyRootFilesystem": True}
    assert sidecar["volumeMounts"] == [{"name": "sandbox-io", "mountPath": "/run/sandbox-io"}]
    assert sidecar["command"][2].startswith("/usr/bin/mkfifo -m 0600 /run/sandbox-io/stdout /run/sandbox-io/stderr &&")
    assert sidecar["resources"]["requests"] == sidecar["resources"]["limits"]
    security = container["securityContext"]
    assert security == {
        "runAsNonRoot": True,
        "runAsUser": profile.uid,
        "runAsGroup": profile.gid,
        "readOnlyRootFilesystem": profile.read_only_root,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], "add": []},
        "seccompProfile": {"type": "Localhost", "localhostProfile": f"sandbox-orchestrator/{profile.seccomp}.json"},
        "procMount": "Default",
    }
    assert spec["securityContext"]["fsGroup"] == profile.gid
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert (spec["hostNetwork"], spec["hostPID"], spec["hostIPC"], spec["shareProcessNamespace"]) == (False,) * 4
    assert spec["dnsPolicy"] == "None" and spec["dnsConfig"]["nameservers"] == ["127.0.0.1"]
    assert spec["activeDeadlineSeconds"] >= profile.wall_timeout_s
    assert spec["terminationGracePeriodSeconds"] == 0
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    assert resources["limits"]["memory"] == str(profile.memory_bytes)
    # the pod asks for exactly the profile's cpu, bounded at the pod's level (the sidecar's relays share it),
    # the command alone never above it; the memory the command's plus the sidecar's, requests = limits
    millis = f"{round(profile.cpus * 1000)}m"
    assert spec["resources"]["requests"] == spec["resources"]["limits"]
    assert spec["resources"]["limits"] == {"cpu": millis, "memory": str(profile.memory_bytes + 32 * 1024 * 1024)}
    assert resources["limits"]["cpu"] == millis and "cpu" not in sidecar["resources"]["limits"]
    assert resources["limits"]["ephemeral-storage"] == str(profile.fsize_bytes)
    # the start barrier (until the controller is attached; stdin /dev/null without any), then the kubelet's
    # API server variables removed (env, never meeting the argv) with the barrier's PWD, then the rlimits
    unset = [arg for name in API_SERVICE_ENV for arg in ("-u", name)]
    assert container["command"] == [
        "/bin/sh",
        "-c",
        'd=/run/sandbox-io; n=0; for p in "$d/stdout" "$d/stderr"; do until [ -p "$p" ];'
        " do n=$((n+1)); [ $n -le 6000 ] || exit 125; sleep 0.01; done; done;"
        ' exec "$@" </dev/null >"$d/stdout" 2>"$d/stderr"',
        "sandbox-start",
        "/usr/bin/env",
        *unset,
        "-u",
        "PWD",
        "/usr/bin/prlimit",
        f"--nofile={profile.nofile}:{profile.nofile}",
        f"--fsize={profile.fsize_bytes}:{profile.fsize_bytes}",
        "--",
        "sh",
        "-c",
        "echo hi",
    ]
    assert len(unset) == 16 and all(name.startswith("KUBERNETES_") for name in unset[1::2])
    # the kubelet's world-writable termination-message file, below a directory the sandbox user cannot enter
    assert container["terminationMessagePath"] == "/root/.termination-log"
    assert container["imagePullPolicy"] == "IfNotPresent" and container["image"] == profile.image
    assert (container["stdin"], container["tty"]) == (False, False)
    if profile.runtime == "runsc":
        assert spec["runtimeClassName"] == "gvisor"
    else:
        assert "runtimeClassName" not in spec
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["sandbox-io"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Ki"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    workspace = mounts[profile.workspace.container_path]
    assert workspace["subPath"] == "tenant-a/default"
    assert workspace["readOnly"] is (profile.workspace.mode == "ro")
    assert volumes["workspace"]["persistentVolumeClaim"]["readOnly"] is (profile.workspace.mode == "ro")
    for tmpfs in profile.tmpfs:
        volume = volumes[mounts[tmpfs.path]["name"]]
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": str(tmpfs.size_bytes)}
    if profile.read_only_root:
        assert "/tmp" in mounts  # never the runtime's own writable /tmp
    # the pipes only: no writable place, but under gVisor (it refuses to open a pipe on a read-only mount),
    # where the pipes' tmpfs is shared across the pod's containers by the shim's mount hints
    gvisor = profile.runtime == "runsc"
    assert mounts["/run/sandbox-io"]["readOnly"] is not gvisor
    hints = {k: v for k, v in pod["metadata"]["annotations"].items() if k.startswith("dev.gvisor.")}
    assert hints == (
        {
            f"dev.gvisor.spec.mount.sandbox-io.{k}": v
            for k, v in {"share": "pod", "type": "tmpfs", "options": "rw"}.items()
        }
        if gvisor
        else {}
    )


def test_with_stdin_the_barrier_hands_the_rest_of_it_to_the_command() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    pod = pod_manifest(spec_for(profile, kind=CommandLaunch(stdin=b"data")), settings())
    command = pod["spec"]["containers"][0]["command"]
    assert command[2].endswith('exec "$@" <"$d/stdin" >"$d/stdout" 2>"$d/stderr"')
    assert 'for p in "$d/stdout" "$d/stderr" "$d/stdin"' in command[2]  # waited for with the others


def test_a_pwd_the_spec_sets_is_kept_over_the_barrier_shells() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    command = pod_manifest(spec_for(profile, env={"PWD": "/x"}), settings())["spec"]["containers"][0]["command"]
    assert "PWD=/x" in command and "PWD" not in command


def test_a_variable_the_spec_sets_is_never_unset() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    env = {"LANG": "C.UTF-8", "KUBERNETES_SERVICE_HOST": "set-by-the-profile"}
    command = pod_manifest(spec_for(profile, env=env), settings())["spec"]["containers"][0]["command"]
    assert "KUBERNETES_SERVICE_HOST" not in command and "KUBERNETES_SERVICE_PORT" in command


@pytest.mark.parametrize("tty", [False, True])
def test_a_sessions_pod_idles_with_the_commands_hardening_and_its_command_is_exec_d(tty: bool) -> None:
    profile = ProfileRegistry().resolve("workspace-write", session=True)
    session = spec_for(profile, kind=SessionLaunch(tty=tty))
    one_shot = pod_manifest(spec_for(profile), settings())
    pod = pod_manifest(session, settings())
    container = pod["spec"]["containers"][0]
    # nothing of the command in the pod: it idles until its deadline stops it (the session's lifetime)
    assert container["command"][:3] == ["/bin/sh", "-c", 'exec sleep "$1"']
    assert int(container["command"][-1]) > pod["spec"]["activeDeadlineSeconds"] >= profile.session_lifetime_s
    assert "echo hi" not in str(pod)
    # everything else is the one-shot pod's: the same hardening, limits, mounts (the exec'd command runs there)
    for key in ("securityContext", "resources", "volumeMounts", "env", "workingDir", "image"):
        assert container[key] == one_shot["spec"]["containers"][0][key], key
    assert (container["stdin"], container["tty"]) == (False, False)  # its terminal is the exec's
    # the exec'd command: exactly the spec's env and rlimits, like the one-shot command
    assert sandbox_argv(session)[-3:] == ["sh", "-c", "echo hi"]
    assert sandbox_argv(session)[0] == "/usr/bin/env" and "/usr/bin/prlimit" in sandbox_argv(session)


def test_labels_are_label_safe_and_the_owner_is_kept_whole_in_an_annotation() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    pod = pod_manifest(spec_for(profile), settings())
    labels = pod["metadata"]["labels"]
    assert labels[LABEL_MANAGED_BY] == "sandbox-orchestrator"
    assert labels[LABEL_EXECUTION_ID] == "ex-18f0a-0123456789abcdef"
    assert labels[LABEL_OWNER] == label_value("host~pidns4026531836:123:456")
    assert all(len(v) <= 63 and ":" not in v and "~" not in v for v in labels.values())
    assert pod["metadata"]["annotations"][ANNOTATION_OWNER] == "host~pidns4026531836:123:456"
    assert pod["metadata"]["name"] == "sbx-ex-18f0a-0123456789abcdef"
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize(
    "workspace", ["/srv/workspaces", "/srv/other/x", "/srv/workspaces/../etc", "/srv/workspacesX/a"]
)
def test_a_workspace_outside_the_claims_root_is_refused(workspace: str) -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    with pytest.raises(SandboxUnavailable, match="not below the claim's root"):
        pod_manifest(spec_for(profile, workspace=Workspace(workspace)), settings())


def test_copy_mode_mounts_an_empty_dir_not_the_claim() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    delivery = WorkspaceDelivery(mode="copy", root=ROOT)
    pod = pod_manifest(spec_for(profile, workspace=Workspace("/anywhere")), KubernetesSettings(workspace=delivery))
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "workspace")
    assert volume == {"name": "workspace", "emptyDir": {}}


def test_a_ci_runner_s_externals_are_a_read_only_sub_path_of_the_claim() -> None:
    """The runner's externals the deployment put on the claim (beside the workspace, where no sandbox's sub-path
    reaches) are mounted from it read-only at /__e; outside the claim's root, or without a claim (copy mode),
    refused."""
    kept = f"{ROOT}/tenant-a/.ci-externals/runner-1"
    profile = (
        ProfileRegistry()
        .resolve("ci")
        .model_copy(update={"read_only_mounts": (ResolvedMount(source=kept, target="/__e"),)})
    )
    workspace = Workspace(f"{ROOT}/tenant-a/runner-1")
    pod = pod_manifest(spec_for(profile, workspace=workspace), settings())
    [command] = [c for c in pod["spec"]["containers"] if c["name"] == "sandbox"]
    mounts = {m["mountPath"]: m for m in command["volumeMounts"]}
    assert mounts["/__e"] == {
        "name": "workspace",
        "mountPath": "/__e",
        "subPath": "tenant-a/.ci-externals/runner-1",
        "readOnly": True,
    }
    assert mounts["/__w"]["subPath"] == "tenant-a/runner-1" and mounts["/__w"]["readOnly"] is False
    outside = profile.model_copy(update={"read_only_mounts": (ResolvedMount(source="/etc", target="/__e"),)})
    with pytest.raises(SandboxUnavailable, match="externals /etc is not below the claim's root"):
        pod_manifest(spec_for(outside, workspace=workspace), settings())
    copy = KubernetesSettings(workspace=WorkspaceDelivery(mode="copy", root=ROOT))
    with pytest.raises(SandboxUnavailable, match="in copy mode a JavaScript action is refused"):
        pod_manifest(spec_for(profile, workspace=workspace), copy)


def test_a_runtime_without_a_runtime_class_is_unavailable_never_downgraded() -> None:
    profile = ProfileRegistry().resolve("untrusted")
    with pytest.raises(SandboxUnavailable, match="no RuntimeClass"):
        pod_manifest(spec_for(profile), settings(runtime_classes={}))


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"argv": ()}, InputInvalid),
        ({"workdir": "relative"}, InputInvalid),
        ({"env": {"A=B": "x"}}, InputInvalid),
        ({"env": {"A": "x\x00y"}}, InputInvalid),
        ({"kind": CommandLaunch(tty=True)}, SandboxUnavailable),
    ],
)
def test_bad_specs_are_refused(changes: dict[str, object], error: type[Exception]) -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    with pytest.raises(error):
        pod_manifest(spec_for(profile, **changes), settings())


def test_the_mapping_table_names_every_resolved_profile_field() -> None:
    hashes = {"profile_hash", "seccomp_sha256", "definition_sha256"}  # what it is and came from, not a setting
    fields = set(ResolvedProfile.model_fields) - {"name", "seccomp_json", *hashes}
    assert {row[0] for row in PROFILE_MAPPING} == fields


def test_the_services_workspaces_must_be_on_the_claim() -> None:
    from pydantic import ValidationError

    from orchestrator.pipeline.config import OrchestratorConfig

    backend = {"kind": "kubernetes", "kubernetes": {"workspace": {"mode": "pvc", "root": "/srv/ws"}}}
    OrchestratorConfig.model_validate({"backend": backend, "service": {"workspaces": "/srv/ws/tenants"}})
    with pytest.raises(ValidationError, match=r"not below backend\.kubernetes\.workspace\.root"):
        OrchestratorConfig.model_validate({"backend": backend, "service": {"workspaces": "/var/lib/other"}})
    copy = {"kind": "kubernetes", "kubernetes": {"workspace": {"mode": "copy"}}}
    OrchestratorConfig.model_validate({"backend": copy, "service": {"workspaces": "/var/lib/other"}})


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [(1.0, (950, 50)), (0.5, (450, 50)), (2.25, (2200, 50)), (0.1, (90, 10)), (0.02, (18, 2)), (0.001, (1, 1))],
)
def test_the_sidecar_cpu_comes_out_of_the_profile(cpus: float, expected: tuple[int, int]) -> None:
    command, sidecar = split_cpu(cpus)
    assert (command, sidecar) == expected
    assert command + sidecar == max(2, round(cpus * 1000))


@pytest.mark.parametrize("name", BUILTIN)
def test_a_pre_started_pod_is_the_cold_pod_with_our_init_waiting_in_it(name: str) -> None:
    profile = ProfileRegistry().resolve(name)
    now = 1_900_000_000.0
    pooled = spec_for(profile, kind=PooledLaunch(), env={}, deadline_unix=now + 300 + profile.wall_timeout_s + 5)
    pod = pod_manifest(pooled, settings(seccomp="localhost"), now=now)
    # a cold one-shot command starts through the init too (the backend's create: waiting)
    cold_spec = spec_for(profile, kind=CommandLaunch(stdin=b"x"))
    cold = pod_manifest(cold_spec, settings(seccomp="localhost"), now=now, waiting=True)
    container, sidecar = pod["spec"]["containers"]
    # everything fixed at start is the cold pod's: the hardening, limits, mounts, the sidecar with a stdin pipe
    # and the init's status pipe
    for field in ("image", "resources", "volumeMounts", "securityContext", "stdin", "tty"):
        assert container[field] == cold["spec"]["containers"][0][field], field
    cold_sidecar = cold["spec"]["containers"][1]
    assert {**sidecar, "command": sidecar["command"][:-1]} == {**cold_sidecar, "command": cold_sidecar["command"][:-1]}
    assert int(sidecar["command"][-1]) > pod["spec"]["activeDeadlineSeconds"]  # it idles past the pod's deadline
    assert {k: v for k, v in pod["spec"].items() if k != "activeDeadlineSeconds"} == {
        k: v for k, v in cold["spec"].items() if k != "activeDeadlineSeconds"
    } | {"containers": pod["spec"]["containers"]}
    # what the request brings comes with the launch: no variables, the workspace as working directory
    assert (container["env"], container["workingDir"]) == ([], profile.workspace.container_path)
    # the init behind the barrier, with the command's rlimits and without the kubelet's variables
    command = container["command"]
    assert command[:2] == ["/bin/sh", "-c"] and command[3] == "sandbox-start"
    init = dataclasses.replace(pooled, argv=(INIT_PATH,))
    assert command[4:] == sandbox_argv(init) and command[-1] == INIT_PATH
    # the status pipe before stdin, stdin last: the claim's
    assert command[2].endswith('exec "$@" >"$d/stdout" 2>"$d/stderr" 3>"$d/status" <"$d/stdin"')
    assert "/run/sandbox-io/status" in sidecar["command"][2]
    # its deadline counts its wait in the pool: the kubelet's backstop is the pool's deadline
    assert pod["spec"]["activeDeadlineSeconds"] == math.ceil(300 + profile.wall_timeout_s + 5)
    # a cold pod launched through its init: the controller's clock starts at the launch, once the relays opened
    # (they may take the start timeout): the kubelet's backstop never comes before the controller's deadline
    start_timeout = settings(seccomp="localhost").start_timeout_s
    assert cold["spec"]["activeDeadlineSeconds"] == math.ceil(profile.wall_timeout_s) + 5 + math.ceil(start_timeout)


@pytest.mark.parametrize("changes", [{"stdin": b"x"}, {"tty": True}])
def test_a_pre_started_pod_takes_no_stdin_or_terminal_of_its_own(changes: dict[str, object]) -> None:
    """Its stdin is its launch's and it has no terminal: a pooled spec with either cannot even be built."""
    with pytest.raises(TypeError):
        PooledLaunch(**changes)  # type: ignore[arg-type]
    profile = ProfileRegistry().resolve("workspace-write")
    pooled = spec_for(profile, kind=PooledLaunch())
    assert (pooled.stdin, pooled.tty, pooled.session) == (None, False, False)
    container = pod_manifest(pooled, settings())["spec"]["containers"][0]
    assert (container["stdin"], container["tty"]) == (False, False)


def test_copy_mode_cannot_pre_start_a_pod() -> None:
    profile = ProfileRegistry().resolve("workspace-write")
    copy = KubernetesSettings(workspace=WorkspaceDelivery(mode="copy"))
    with pytest.raises(SandboxUnavailable, match="pvc"):
        pod_manifest(spec_for(profile, kind=PooledLaunch()), copy)


@pytest.mark.parametrize("name", BUILTIN)
def test_without_pod_level_resources_the_sidecars_cpu_comes_out_of_the_commands(name: str) -> None:
    """A cluster that drops pod-level resources (PodLevelResources off): the pod's total is still the
    profile's cpu, as the sum of its containers' limits."""
    profile = ProfileRegistry().resolve(name)
    spec = pod_manifest(spec_for(profile), settings(seccomp="localhost"), pod_level=False)["spec"]
    assert "resources" not in spec
    container, sidecar = spec["containers"]
    pod_cpu = sum(int(c["resources"]["limits"]["cpu"].removesuffix("m")) for c in spec["containers"])
    assert pod_cpu == round(profile.cpus * 1000)
    assert sidecar["resources"]["limits"]["cpu"] == "50m"
    assert all(c["resources"]["requests"] == c["resources"]["limits"] for c in (container, sidecar))
