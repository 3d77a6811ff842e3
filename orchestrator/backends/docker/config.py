"""The engine's container configuration for one LaunchSpec: every hardening setting, explicit.

Raw Docker Engine API JSON (``POST /containers/create``), built here rather than through the SDK's
helpers so that what is sent is exactly what is reviewed and tested (``docker inspect`` must show
each value back). Pure: no I/O.

Decisions beyond a one-to-one mapping of the resolved profile:

* ``Entrypoint: []`` + ``Cmd: argv`` — the argv runs exactly as given, whatever ENTRYPOINT the image has.
* ``Init: false`` — no docker-init (tini): it would bind-mount a host binary into the sandbox and put
  a process between the command and PID 1. Without it the command is PID 1, so when it exits the
  kernel kills everything left in its PID namespace (double-forked daemons cannot outlive it);
  zombies it fails to reap only count against its own pids limit; and we stop sandboxes with
  SIGKILL, which PID 1 cannot ignore from outside its namespace.
* ``IpcMode: private`` + ``ShmSize`` 64 MiB (at most the memory limit) — a private IPC namespace
  (never shared with the host or another sandbox). ``none`` would remove /dev/shm, which breaks POSIX
  semaphores (Python multiprocessing, pytest-xdist). /dev/shm is a nosuid,nodev,noexec tmpfs whose
  pages count against the memory limit.
* ``CgroupnsMode: private`` — on cgroup v1 the engine's default is the host's cgroup namespace.
* ``/tmp`` — always an explicit mount: the profile's tmpfs, or, if a profile has none there and the
  root is read-only, an empty read-only tmpfs (``_support.tmp_rule``). Without one, runsc would put its
  own writable, uncapped tmpfs on /tmp, silently breaking the read-only root the profile asked for.
* ``LogConfig: none`` — output is captured through the attach stream only; the engine keeps no log
  file of sandbox output (an unbounded json-file log could fill the engine's disk).
* ``Healthcheck: NONE`` — the engine never execs an image's health check inside the sandbox.
* ``read_only_mounts`` (a CI job's runner externals at /__e) are read-only, non-recursive binds of directories
  no workspace is or holds (``pipeline.externals``: beside the runner's work directory).
* Read-only workspace mounts are non-recursive: this engine cannot make sub-mounts read-only, so a
  writable sub-mount under a read-only workspace is hidden rather than left writable.
* ``Hostname: sandbox`` — fixed, so HOSTNAME (which the engine always adds) reveals nothing; and
  ``/etc/hostname``, ``/etc/hosts``, ``/etc/resolv.conf`` are the sandbox's own, read-only, instead
  of the engine's copies of the host's network configuration (see ``sandbox_etc``).
"""

from __future__ import annotations

from orchestrator.backends._support.launch_message import INIT_PATH
from orchestrator.backends._support.spec_checks import check_spec
from orchestrator.backends._support.tmp_rule import TMP, needs_empty_tmp
from orchestrator.backends.base import LaunchSpec
from orchestrator.backends.docker.sandbox_etc import HOSTNAME, etc_mounts
from orchestrator.backends.docker.status_pipe import StatusPipe
from orchestrator.profiles import ResolvedProfile

SHM_SIZE_BYTES = 64 * 1024 * 1024
#: an empty read-only tmpfs over /tmp when the profile has no writable one there (see module doc)
READ_ONLY_TMP_OPTIONS = "ro,nosuid,nodev,noexec,size=4096,mode=1777"


def tmpfs_mounts(profile: ResolvedProfile) -> dict[str, str]:
    mounts = {t.path: t.mount_options() for t in profile.tmpfs}
    if needs_empty_tmp(profile):
        mounts[TMP] = READ_ONLY_TMP_OPTIONS
    return mounts


def pooled_command(status: StatusPipe | None) -> list[str]:
    """A pre-started sandbox's command: our init, naming its status pipe when it has one."""
    return [INIT_PATH, status.container_path] if status is not None else [INIT_PATH]


def container_config(
    spec: LaunchSpec, *, etc_dir: str, cgroup_parent: str = "", status: StatusPipe | None = None
) -> dict[str, object]:
    """``POST /containers/create`` body for ``spec`` (validated: argv, workdir, env); ``etc_dir`` holds
    the sandbox's own hostname, hosts and resolv.conf (``sandbox_etc.etc_directory``); ``cgroup_parent``
    is its own parent cgroup (``run_cgroup``), "" for the engine's default; ``status``: a pre-started
    sandbox's status pipe (mounted, and named to its init)."""
    profile = spec.profile
    check_spec(spec)
    # stdin bytes never come with a terminal or a session (CommandLaunch), nor with a waiting sandbox, whose
    # stdin carries its launch message (then the command's own stdin, or nothing); a session's comes later
    with_stdin = spec.stdin is not None or spec.session or spec.pooled
    host_config: dict[str, object] = {
        "Runtime": profile.runtime,
        # always none: a run that may reach hosts does so through our proxy, served in this very namespace
        "NetworkMode": "none",
        "ReadonlyRootfs": profile.read_only_root,
        "Tmpfs": tmpfs_mounts(profile),
        "Mounts": [
            {
                "Type": "bind",
                "Source": spec.workspace.local_path,
                "Target": profile.workspace.container_path,
                "ReadOnly": profile.workspace.mode == "ro",
                "BindOptions": {
                    "Propagation": "rprivate",
                    "NonRecursive": profile.workspace.mode == "ro",
                },
            },
            *(
                {
                    "Type": "bind",
                    "Source": mount.source,
                    "Target": mount.target,
                    "ReadOnly": True,
                    "BindOptions": {"Propagation": "rprivate", "NonRecursive": True},
                }
                for mount in profile.read_only_mounts
            ),
            *etc_mounts(etc_dir),
            *([status.mount()] if status is not None else []),  # made for pre-started sandboxes only
        ],
        "CapDrop": list(profile.cap_drop),  # ["ALL"]
        "CapAdd": None,
        "SecurityOpt": [
            "no-new-privileges:true",
            "seccomp=" + profile.seccomp_json,  # the profile JSON inline, as the engine API wants it
        ],
        "Privileged": False,
        "Devices": [],
        "DeviceCgroupRules": [],
        "PidsLimit": profile.pids_limit,
        "Memory": profile.memory_bytes,
        "MemorySwap": profile.memory_swap_bytes,  # == Memory: no swap
        "MemorySwappiness": 0,
        "OomKillDisable": False,
        "NanoCpus": profile.nano_cpus,
        "Ulimits": [
            {"Name": "nofile", "Soft": profile.nofile, "Hard": profile.nofile},
            {"Name": "fsize", "Soft": profile.fsize_bytes, "Hard": profile.fsize_bytes},
        ],
        "IpcMode": "private",
        "ShmSize": min(SHM_SIZE_BYTES, profile.memory_bytes),
        "PidMode": "",  # a private PID namespace
        "UTSMode": "",
        "CgroupnsMode": "private",
        "CgroupParent": cgroup_parent,
        "Init": False,
        "AutoRemove": False,  # removed explicitly after its state was read
        "RestartPolicy": {"Name": "no"},
        "LogConfig": {"Type": "none", "Config": {}},
        "PublishAllPorts": False,
    }
    return {
        "Image": profile.image,
        "Entrypoint": [],
        "Cmd": pooled_command(status) if spec.pooled else list(spec.argv),
        "User": profile.user,
        # pooled: the launch message brings the workdir and the variables (set over the image's by the init)
        "WorkingDir": profile.workspace.container_path if spec.pooled else spec.workdir,
        "Env": [] if spec.pooled else [f"{key}={value}" for key, value in spec.env.items()],
        "Labels": spec.labels,
        "Hostname": HOSTNAME,
        "Tty": spec.tty,
        "OpenStdin": with_stdin,
        "StdinOnce": with_stdin,  # stdin closes when our attach stops sending: the command sees EOF
        "AttachStdin": False,  # we attach ourselves, before start
        "AttachStdout": False,
        "AttachStderr": False,
        "NetworkDisabled": False,
        "Healthcheck": {"Test": ["NONE"]},
        "HostConfig": host_config,
    }
