"""Execution profile models: the file form (``Profile``), policy caps and the resolved form.

Units are explicit everywhere: sizes are bytes (the file form also takes ``64m``/``1g``: powers of
1024), times are seconds. The invariants of the security baseline are part of the model: a profile
that asks for root, capabilities, a network, a writable root or privilege gain does not validate.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from orchestrator.domain.canonical import canonical_sha256, sha256_hex
from orchestrator.domain.globs import check_glob
from orchestrator.domain.hosts import parse_pattern
from orchestrator.domain.images import IMAGE_PATTERN

Runtime = Literal["runc", "runsc"]
WorkspaceMode = Literal["ro", "rw"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
TIB = 1024 * GIB

#: Under gVisor the pids cgroup also counts the sandbox's own host threads (~27 idle, ~2.5 more per
#: process) and reaching the limit kills the whole sandbox: a smaller limit leaves no headroom.
RUNSC_MIN_PIDS = 64

NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$"
NAME_RE = re.compile(NAME_PATTERN)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# an env_allowlist entry: a name, or a shell-style glob of name characters (``*``, ``GITHUB_*``, ``LC_[A-Z]*``)
ENV_ALLOW_PATTERN = r"^(?:[A-Za-z_][A-Za-z0-9_-]*|[A-Za-z0-9_!\-\]]*[*?\[][A-Za-z0-9_*?!\[\]\-]*)$"
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([kKmMgGtT]([iI]?[bB])?|[bB])?\s*$"
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB}
_MODE_RE = re.compile(r"^0?[0-7]{3,4}$")

# Paths a mount must never cover: the kernel's views and the root itself.
_FORBIDDEN_MOUNT_ROOTS = ("/proc", "/sys", "/dev")

# Environment names a request may never set, whatever the profile says: each one changes which program
# or code an allowed command runs (so a policy allowing `git status` would allow anything).
# fmt: off
CODE_LOADING_ENV: frozenset[str] = frozenset(
    {
        "PATH", "HOME", "XDG_CONFIG_HOME", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4",
        "PROMPT_COMMAND", "GLOBIGNORE", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
        "PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS", "NODE_PATH",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "GCONV_PATH", "NLSPATH",
        "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "PAGER", "MANPAGER", "EDITOR", "VISUAL", "BROWSER",
        "LESSOPEN", "LESSCLOSE", "TAR_OPTIONS", "SSH_ASKPASS", "SUDO_ASKPASS", "GIT_SSH",
        "GIT_SSH_COMMAND", "GIT_ASKPASS", "GIT_EDITOR", "GIT_PAGER", "GIT_EXEC_PATH", "GIT_EXTERNAL_DIFF",
        "GIT_PROXY_COMMAND", "GIT_TEMPLATE_DIR", "GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT",
    }
)
# fmt: on
CODE_LOADING_ENV_PREFIXES: tuple[str, ...] = ("LD_", "DYLD_", "BASH_FUNC_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")


def is_code_loading_env(name: str) -> bool:
    """True for an environment name that changes which code a command runs (never request-settable)."""
    return name in CODE_LOADING_ENV or name.startswith(CODE_LOADING_ENV_PREFIXES)


_ENV_GLOB_CHARS = "*?["


def is_env_glob(entry: str) -> bool:
    """Whether an ``env_allowlist`` entry is a shell-style glob (``*``, ``GITHUB_*``) rather than a name."""
    return any(ch in entry for ch in _ENV_GLOB_CHARS)


def env_admitted(allowlist: Iterable[str], name: str) -> bool:
    """Whether a request may set ``name`` under ``allowlist``: it equals an entry or matches a glob entry
    (``fnmatchcase``: case matters, as in the environment), and it is not a code-loading name, which no
    entry admits (a glob never; an exact one is refused when the profile is loaded)."""
    if is_code_loading_env(name):
        return False
    return any(name == entry or (is_env_glob(entry) and fnmatchcase(name, entry)) for entry in allowlist)


# -- value parsers ---------------------------------------------------------------------------------


def parse_size(value: Any) -> int:
    """Bytes from an integer or a human size: ``"64m"``, ``"1g"``, ``"512KiB"``, ``"1.5g"`` (powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError("must be a number of bytes or a size such as '64m' (not a boolean)")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match:
            try:
                amount = Decimal(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]
            except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numbers
                amount = Decimal("NaN")
            if amount.is_finite() and amount == amount.to_integral_value():
                return int(amount)
            raise ValueError("must be a whole number of bytes")
    raise ValueError("must be a number of bytes or a size such as '64m', '1g' or '512KiB' (k, m, g, t: powers of 1024)")


def format_size(n: int) -> str:
    """The shortest exact binary form: 536870912 → ``512MiB``; 1000 → ``1000B``."""
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def _size_schema(minimum: int, maximum: int) -> dict[str, Any]:
    return {
        "anyOf": [
            {"type": "integer", "minimum": minimum, "maximum": maximum},
            {"type": "string", "pattern": SIZE_PATTERN},
        ]
    }


def _abs_path(value: str) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError("must be an absolute path")
    if "\x00" in value or any(part in (".", "..") for part in value.split("/")):
        raise ValueError("must be a normalized absolute path (no '.' or '..')")
    norm = posixpath.normpath(value)
    if norm == "/":
        raise ValueError("must not be '/'")
    for root in _FORBIDDEN_MOUNT_ROOTS:
        if norm == root or norm.startswith(root + "/"):
            raise ValueError(f"must not be {root} or below it")
    return norm


def _covers(a: str, b: str) -> bool:
    """True when one of the two absolute paths is the other or lies below it."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _must_be_true(why: str) -> Any:
    def check(value: Any) -> Any:
        if value is not True:
            raise ValueError(f"must be true: {why}")
        return value

    return check


MemorySize = Annotated[
    int, BeforeValidator(parse_size), Field(ge=6 * MIB, le=TIB), WithJsonSchema(_size_schema(6 * MIB, TIB))
]
OutputSize = Annotated[int, BeforeValidator(parse_size), Field(ge=1, le=GIB), WithJsonSchema(_size_schema(1, GIB))]
FileSize = Annotated[
    int, BeforeValidator(parse_size), Field(ge=4 * KIB, le=TIB), WithJsonSchema(_size_schema(4 * KIB, TIB))
]
WorkspaceBytes = Annotated[
    int, BeforeValidator(parse_size), Field(ge=0, le=64 * TIB), WithJsonSchema(_size_schema(0, 64 * TIB))
]
TmpfsSize = Annotated[
    int, BeforeValidator(parse_size), Field(ge=MIB, le=64 * GIB), WithJsonSchema(_size_schema(MIB, 64 * GIB))
]
AbsPath = Annotated[
    str,
    BeforeValidator(_abs_path),
    WithJsonSchema({"type": "string", "pattern": "^/", "description": "An absolute path, not /, /proc, /sys, /dev."}),
]
ProfileName = Annotated[str, Field(pattern=NAME_PATTERN, description="Lowercase letters, digits, '.', '_', '-'.")]
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN, max_length=128)]
EnvAllowEntry = Annotated[str, Field(pattern=ENV_ALLOW_PATTERN, max_length=128), AfterValidator(check_glob)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# -- the file form ---------------------------------------------------------------------------------


class Workspace(_Model):
    """How the workspace directory is mounted."""

    mode: WorkspaceMode = Field(default="rw", description="ro: read-only bind mount; rw: read-write.")
    container_path: AbsPath = Field(default="/workspace", description="Mount point inside the sandbox (absolute).")


class Tmpfs(_Model):
    """A size-capped tmpfs mount; always nosuid,nodev. Its pages count against the memory limit."""

    path: AbsPath = Field(description="Mount point inside the sandbox (absolute).")
    size: TmpfsSize = Field(description="Size cap in bytes (or '64m', '1g': powers of 1024).")
    mode: str = Field(
        default="1777",
        pattern=r"^[0-7]{4}$",
        description='Permissions as a quoted octal string, e.g. "1777" (sticky, world-writable) or "0700".',
    )
    noexec: bool = Field(
        default=True,
        description="Mount noexec (programs cannot be run from it); false for a place build tools run what they make.",
    )
    nosuid: Literal[True] = Field(default=True, description="Always true: setuid bits are ignored.")
    nodev: Literal[True] = Field(default=True, description="Always true: device files cannot be opened.")

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        if not isinstance(value, str) or not _MODE_RE.match(value):
            raise ValueError('must be a quoted octal string such as "1777" or "0755"')
        return value.rjust(4, "0")[-4:] if len(value) <= 4 else value[1:]

    _nosuid = field_validator("nosuid", mode="before")(_must_be_true("tmpfs mounts are always nosuid"))
    _nodev = field_validator("nodev", mode="before")(_must_be_true("tmpfs mounts are always nodev"))

    def mount_options(self) -> str:
        """Docker ``--tmpfs`` / ``HostConfig.Tmpfs`` option string (size in bytes, octal mode). ``exec`` is
        spelled out: the engine mounts a tmpfs noexec unless told otherwise."""
        flags = ["rw", "nosuid", "nodev", "noexec" if self.noexec else "exec"]
        return ",".join([*flags, f"size={self.size}", f"mode={self.mode}"])


class Limits(_Model):
    """Resource limits. Memory swap always equals memory (no swap); soft and hard ulimits are equal."""

    cpus: float = Field(default=1.0, gt=0, le=256, description="CPU cores (fractional allowed), e.g. 1 or 0.5.")
    memory: MemorySize = Field(
        default=512 * MIB, description="Memory limit in bytes ('512m', '2g'); swap is always equal (none)."
    )
    pids: int = Field(default=128, ge=8, le=1_000_000, description="Maximum number of processes and threads.")
    wall_timeout_s: float = Field(default=300.0, gt=0, le=86_400, description="Wall-clock deadline in seconds.")
    stdout_max_bytes: OutputSize = Field(default=MIB, description="Captured stdout cap in bytes; more is truncated.")
    stderr_max_bytes: OutputSize = Field(default=MIB, description="Captured stderr cap in bytes; more is truncated.")
    nofile: int = Field(default=1024, ge=64, le=1_048_576, description="Open files limit (RLIMIT_NOFILE, soft = hard).")
    fsize: FileSize = Field(default=256 * MIB, description="Largest file a process may write, in bytes (RLIMIT_FSIZE).")
    workspace_write_bytes: WorkspaceBytes = Field(
        default=GIB,
        description="Write budget: how much the run may grow the workspace (sizes of the files it creates plus "
        "the growth of existing ones), in bytes ('1g'). Enforced while it runs: passing it kills the sandbox "
        "(SANDBOX.WORKSPACE_LIMIT).",
    )
    workspace_write_files: int = Field(
        default=100_000,
        ge=0,
        le=10_000_000,
        description="Write budget: how many entries (files, directories, links) the run may create in the "
        "workspace. Enforced while it runs, like workspace_write_bytes.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_swap(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in ("swap", "memory_swap", "memswap", "memswap_limit"):
                if key in data:
                    raise ValueError(f"there is no {key!r} setting: swap always equals memory (no swap)")
        return data

    @field_validator("cpus", "wall_timeout_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class Pool(_Model):
    """Pre-started sandboxes (the config's ``pool:``) for this profile's runs."""

    enabled: bool = Field(
        default=True,
        description="Whether runs of this profile may take a pre-started sandbox when the config's pool is on "
        "(false: every run starts its sandbox cold).",
    )


class Network(_Model):
    """What a sandbox of this profile may reach: nothing (``none``), or the hosts of an allowlist through our
    egress proxy (``allowlist``): its only route; DNS is the proxy's, never the sandbox's."""

    mode: Literal["none", "allowlist"] = Field(default="none", description="none | allowlist")
    allow: tuple[str, ...] = Field(
        default=(),
        max_length=256,
        description="With mode allowlist: host:port patterns ('pypi.org:443', '*.pythonhosted.org:443', "
        "'10.0.0.5:8080', 'git.example.com:*'); hosts the policy's safety.network_allow does not cover are "
        "asked about.",
    )

    @field_validator("allow")
    @classmethod
    def _patterns(cls, allow: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted({parse_pattern(text).canonical for text in allow}))

    @model_validator(mode="after")
    def _mode_and_hosts_agree(self) -> Network:
        if self.mode == "allowlist" and not self.allow:
            raise ValueError("mode allowlist needs at least one host:port pattern in allow")
        if self.mode == "none" and self.allow:
            raise ValueError("mode none reaches nothing: set mode: allowlist to use allow")
        return self


class Sessions(_Model):
    """Interactive sessions (exec_command + write_stdin) with this profile."""

    enabled: bool = Field(default=True, description="Whether exec_command may open a session with this profile.")
    interactive_shells: bool = Field(
        default=True,
        description="Whether a session may run an interactive shell or REPL (bash, sh, python3 with no script, "
        "...): false leaves one-shot commands only for tenants that need them (a command typed into such a "
        "shell is never gated: the known limit of sessions).",
    )
    idle_timeout_s: float = Field(
        default=600.0, gt=0, le=86_400, description="A session with no input and no output this long is closed."
    )
    max_lifetime_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="A session is closed this long after it opened, whatever it does (its sandbox's deadline); "
        "default: the profile's limits.wall_timeout_s (a session never outlives what a command may).",
    )

    @field_validator("idle_timeout_s", "max_lifetime_s")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


def _none_or_network(schema: dict[str, Any]) -> None:
    """The file form takes ``network: none`` as well as the mapping (the field's validator turns one into
    the other): the schema says both."""
    network = {key: schema.pop(key) for key in ("$ref", "allOf") if key in schema}
    schema["anyOf"] = [{"const": "none"}, network]


class Profile(_Model):
    """An execution profile as written in ``profiles/NAME.yaml`` (the file form)."""

    name: ProfileName = Field(description="The profile name; must equal the file name without .yaml.")
    description: str = Field(
        min_length=1,
        max_length=500,
        description="What the profile is for (not inherited, but kept by an override of the same name unless "
        "it changes runtime, seccomp, network or workspace.mode).",
    )
    extends: ProfileName | None = Field(
        default=None,
        description="Parent profile: its settings are deep-merged under these (maps merged, lists replaced). "
        "The file's own name: the definition it overrides, earlier on the search path.",
    )
    image: str = Field(
        default="sandbox-orchestrator/default:latest",
        pattern=IMAGE_PATTERN,
        max_length=512,
        description="Container image reference with an explicit tag or digest.",
    )
    runtime: Runtime = Field(default="runc", description="OCI runtime: runc, or runsc (gVisor) for stronger isolation.")
    user: str = Field(
        default="1000:1000",
        description='Numeric "uid:gid" (quoted); neither may be 0 (root).',
        json_schema_extra={"pattern": r"^[0-9]+:[0-9]+$"},
    )
    read_only_root: Literal[True] = Field(
        default=True,
        description="Always true; a writable root is only an approved per-request escalation.",
    )
    network: Network = Field(
        default_factory=Network,
        description="'none' (the default: no network at all), or {mode: allowlist, allow: [host:port, ...]}.",
        json_schema_extra=_none_or_network,
    )
    workspace: Workspace = Field(default_factory=Workspace, description="The workspace mount.")
    tmpfs: tuple[Tmpfs, ...] = Field(
        default=(Tmpfs(path="/tmp", size=64 * MIB),),  # noqa: S108 - a path inside the sandbox
        max_length=16,
        description="Size-capped tmpfs mounts (the only writable places besides an rw workspace).",
    )
    limits: Limits = Field(default_factory=Limits, description="Resource limits.")
    sessions: Sessions = Field(default_factory=Sessions, description="Interactive sessions.")
    pool: Pool = Field(default_factory=Pool, description="Pre-started sandboxes.")
    seccomp: ProfileName = Field(
        default="default", description="Seccomp profile: the name of a file in profiles/seccomp/ (without .json)."
    )
    capabilities: tuple[str, ...] = Field(
        default=(), max_length=0, description="Must be empty: every capability is dropped and none can be added."
    )
    no_new_privileges: Literal[True] = Field(default=True, description="Always true (no setuid privilege gain).")
    env_allowlist: tuple[EnvAllowEntry, ...] = Field(
        default=(),
        max_length=256,
        description="Environment names a request may set, or shell-style globs of them ('*', 'GITHUB_*'); a"
        " code-loading name (PATH, HOME, LD_*, PYTHONPATH, ...) is never admitted, by a glob neither.",
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="Fixed, non-secret environment defaults (PATH, HOME, LANG, ...)."
    )

    @field_validator("user", mode="before")
    @classmethod
    def _user(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError('must be a quoted "uid:gid" string, e.g. "1000:1000"')
        match = re.fullmatch(r"([0-9]{1,10}):([0-9]{1,10})", value)
        if not match:
            raise ValueError('must be numeric "uid:gid", e.g. "1000:1000"')
        uid, gid = int(match.group(1)), int(match.group(2))
        if uid == 0 or gid == 0:
            raise ValueError("must not be root: uid 0 and gid 0 are not allowed")
        if uid > 2**31 - 1 or gid > 2**31 - 1:
            raise ValueError("uid and gid must be below 2^31")
        return f"{uid}:{gid}"

    _read_only_root = field_validator("read_only_root", mode="before")(
        _must_be_true(
            "a writable root filesystem is only granted per request (sandbox_permissions.writable_root, asked "
            "and approved), never by a profile",
        )
    )
    _no_new_privileges = field_validator("no_new_privileges", mode="before")(
        _must_be_true("privilege gain through setuid/setgid files is never allowed")
    )

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, value: Any) -> Any:
        if value == "none":
            return {"mode": "none"}
        if isinstance(value, str):
            raise ValueError(
                f"{value[:40]!r} is not a network setting: 'none', or {{mode: allowlist, allow: [host:port, ...]}} "
                "(a sandbox never gets an open network; more hosts are asked per request: sandbox_permissions.network)"
            )
        return value

    @field_validator("capabilities", mode="before")
    @classmethod
    def _capabilities(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)) and value:
            asked = ", ".join(str(v) for v in value)[:200]
            raise ValueError(f"every capability is dropped and none may be added (asked for: {asked})")
        return value

    @field_validator("seccomp", mode="before")
    @classmethod
    def _seccomp(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() == "unconfined":
            raise ValueError("'unconfined' is not allowed: every sandbox runs under a seccomp profile")
        return value

    @field_validator("tmpfs")
    @classmethod
    def _tmpfs(cls, mounts: tuple[Tmpfs, ...], info: ValidationInfo) -> tuple[Tmpfs, ...]:
        workspace = info.data.get("workspace")
        for i, mount in enumerate(mounts):
            if workspace is not None and _covers(mount.path, workspace.container_path):
                raise ValueError(
                    f"tmpfs[{i}] ({mount.path}) overlaps workspace.container_path ({workspace.container_path})"
                )
            for j in range(i):
                if _covers(mount.path, mounts[j].path):
                    raise ValueError(f"tmpfs[{i}] ({mount.path}) overlaps tmpfs[{j}] ({mounts[j].path})")
        return mounts

    @field_validator("limits")
    @classmethod
    def _limits(cls, limits: Limits, info: ValidationInfo) -> Limits:
        if info.data.get("runtime") == "runsc" and limits.pids < RUNSC_MIN_PIDS:
            raise ValueError(
                f"pids must be at least {RUNSC_MIN_PIDS} with runtime runsc: gVisor's own host threads "
                "(~27 idle, ~2.5 per process) count against it and reaching it kills the whole sandbox"
            )
        return limits

    @field_validator("env_allowlist")
    @classmethod
    def _env_allowlist(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(names)) != len(names):
            raise ValueError("names must be unique")
        bad = [n for n in names if is_code_loading_env(n) and not is_env_glob(n)]
        if bad:
            raise ValueError(
                f"{', '.join(bad)} cannot be allowed: it changes which code an allowed command runs "
                "(set a fixed value in env instead)"
            )
        # a glob that only code-loading names could match (LD_*) admits nothing: a mistake, said now
        empty = [n for n in names if is_env_glob(n) and n.startswith(CODE_LOADING_ENV_PREFIXES)]
        if empty:
            raise ValueError(
                f"{', '.join(empty)} admits nothing: the names it matches change which code an allowed command"
                " runs and are never allowed"
            )
        return names

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        if len(env) > 256:
            raise ValueError("at most 256 variables")
        for key, value in env.items():
            if "\x00" in value or len(value) > 4096:
                raise ValueError(f"the value of {key} must be at most 4096 characters without NUL bytes")
        return env

    @property
    def uid(self) -> int:
        return int(self.user.split(":")[0])

    @property
    def gid(self) -> int:
        return int(self.user.split(":")[1])


# -- policy caps -----------------------------------------------------------------------------------


class ProfileCaps(_Model):
    """Upper bounds a policy puts on every profile. ``None`` means no cap. Caps only ever narrow."""

    max_memory: MemorySize | None = Field(default=None, description="Memory cap in bytes ('1g').")
    max_cpus: float | None = Field(default=None, gt=0, le=256, description="CPU cores cap.")
    max_pids: int | None = Field(default=None, ge=8, le=1_000_000, description="Processes/threads cap.")
    max_wall_timeout_s: float | None = Field(default=None, gt=0, le=86_400, description="Wall-clock cap in seconds.")
    max_output_bytes: OutputSize | None = Field(
        default=None, description="Cap for stdout and for stderr, each, in bytes."
    )
    max_workspace_write_bytes: WorkspaceBytes | None = Field(
        default=None, description="Cap for the workspace write budget in bytes ('4g')."
    )
    max_workspace_write_files: int | None = Field(
        default=None, ge=0, le=10_000_000, description="Cap for the workspace write budget in entries created."
    )
    allowed_runtimes: tuple[Runtime, ...] | None = Field(
        default=None, description="Runtimes a profile may use; a profile needing another one is refused."
    )
    allowed_images: tuple[Annotated[str, AfterValidator(check_glob)], ...] | None = Field(
        default=None,
        description="Image references (shell-style globs, e.g. 'sandbox-orchestrator/*') a profile may use.",
    )


# -- the resolved form -----------------------------------------------------------------------------


class ResolvedTmpfs(_Model):
    """A tmpfs mount of a resolved profile."""

    path: str = Field(description="Absolute mount point inside the sandbox.")
    size_bytes: int = Field(ge=1, description="Size cap in bytes (Docker tmpfs size=, k8s emptyDir sizeLimit).")
    mode: str = Field(pattern=r"^[0-7]{4}$", description="Permissions, 4-digit octal string (Docker tmpfs mode=).")
    noexec: bool = Field(description="Mounted noexec.")
    nosuid: Literal[True] = Field(default=True, description="Always mounted nosuid.")
    nodev: Literal[True] = Field(default=True, description="Always mounted nodev.")

    def mount_options(self) -> str:
        """Docker ``HostConfig.Tmpfs`` option string, e.g. ``rw,nosuid,nodev,noexec,size=67108864,mode=1777``.
        ``exec`` is spelled out when the profile allows it: the engine mounts a tmpfs noexec unless told so."""
        flags = ["rw", "nosuid", "nodev", "noexec" if self.noexec else "exec"]
        return ",".join([*flags, f"size={self.size_bytes}", f"mode={self.mode}"])


class ResolvedMount(_Model):
    """A directory of the controller's host a sandbox sees read-only (a CI job's runner externals at /__e:
    ``pipeline.externals``); never one a request names."""

    source: str = Field(description="The directory on the controller's host.")
    target: str = Field(description="Absolute mount point inside the sandbox.")


class ResolvedWorkspace(_Model):
    """The workspace mount of a resolved profile."""

    mode: WorkspaceMode = Field(description="ro or rw.")
    container_path: str = Field(description="Absolute mount point inside the sandbox.")


_HASH_EXCLUDED = frozenset({"profile_hash", "seccomp_json", "definition_sha256"})
# what a profile file says that no run gets: words for people, and how the file reached its settings
_NOT_DEFINING = frozenset({"description", "extends"})


def definition_sha256(profile: Profile, seccomp_sha256: str) -> str:
    """Which definition of a profile this is: sha256 of its settings (``extends`` merged; its description and
    the ``extends`` line itself left out: no run gets them) and its seccomp file's sha256. A changed profile
    file (or seccomp file) changes it; a request or caps never do."""
    settings = profile.model_dump(mode="json", exclude=set(_NOT_DEFINING))
    return canonical_sha256({"profile": settings, "seccomp_sha256": seccomp_sha256})


class ResolvedProfile(_Model):
    """The effective settings of one execution: fully explicit, nothing inherited or implied.

    ``profile_hash`` is the sha256 of the canonical JSON of every field except ``profile_hash``,
    ``seccomp_json`` (the seccomp profile enters through ``seccomp_sha256``) and ``definition_sha256``
    (where the settings came from, not what they are). Both hashes are
    computed when omitted and checked when given, so a dumped resolved profile validates back only
    unchanged.
    """

    name: str = Field(description="The profile this was resolved from.")
    image: str = Field(description="Image reference (explicit tag or digest).")
    runtime: Runtime = Field(description="OCI runtime (Docker runtime= / k8s RuntimeClass): runc or runsc.")
    uid: int = Field(ge=1, description="Numeric user id the command runs as (never 0).")
    gid: int = Field(ge=1, description="Numeric primary group id (never 0).")
    read_only_root: bool = Field(description="Root filesystem read-only; false only for an approved escalation.")
    network: Literal["none", "allowlist"] = Field(
        description="none: no network; allowlist: egress_allow through the egress proxy, nothing else."
    )
    egress_allow: tuple[str, ...] = Field(
        default=(), description="With network allowlist: the host:port patterns (canonical, sorted)."
    )
    workspace: ResolvedWorkspace = Field(description="The workspace mount.")
    tmpfs: tuple[ResolvedTmpfs, ...] = Field(description="tmpfs mounts (nosuid,nodev).")
    cpus: float = Field(gt=0, description="CPU cores (Docker NanoCpus = cpus * 1e9; k8s cpu limit = request).")
    memory_bytes: int = Field(ge=1, description="Memory limit in bytes (Docker mem_limit; k8s memory limit = request).")
    memory_swap_bytes: int = Field(
        ge=1, description="Memory + swap in bytes (Docker memswap_limit); always equal to memory_bytes: no swap."
    )
    pids_limit: int = Field(ge=1, description="Maximum processes and threads (Docker pids_limit).")
    wall_timeout_s: float = Field(gt=0, description="Wall-clock deadline in seconds, after which it is killed.")
    stdout_max_bytes: int = Field(ge=1, description="Captured stdout cap in bytes.")
    stderr_max_bytes: int = Field(ge=1, description="Captured stderr cap in bytes.")
    nofile: int = Field(ge=1, description="RLIMIT_NOFILE, soft = hard.")
    fsize_bytes: int = Field(ge=1, description="RLIMIT_FSIZE in bytes, soft = hard.")
    workspace_write_bytes: int = Field(
        ge=0, description="Workspace write budget in bytes, enforced while the command runs."
    )
    workspace_write_files: int = Field(ge=0, description="Workspace write budget in entries created.")
    seccomp: str = Field(description="Seccomp profile name.")
    seccomp_sha256: str = Field(
        default="",
        pattern=r"^([0-9a-f]{64})?$",
        description="sha256 hex of seccomp_json's UTF-8 bytes (computed when omitted, checked when given).",
    )
    seccomp_json: str = Field(
        repr=False, description="The seccomp profile as compact canonical OCI JSON (inline for security_opt)."
    )
    cap_add: tuple[()] = Field(default=(), description="Always empty: no capability is added.")
    cap_drop: tuple[Literal["ALL"]] = Field(default=("ALL",), description="Always ('ALL',): every capability dropped.")
    no_new_privileges: Literal[True] = Field(default=True, description="Always true (no-new-privileges).")
    env: dict[str, str] = Field(description="Fixed environment defaults (a request's allowed names override them).")
    env_allowlist: tuple[str, ...] = Field(
        description="Environment names, or globs of them, a request may set (sorted; never a code-loading name)."
    )
    sessions_enabled: bool = Field(default=True, description="Whether exec_command may open a session.")
    interactive_shells: bool = Field(default=True, description="Whether a session may run a bare shell or REPL.")
    session_idle_timeout_s: float = Field(default=600.0, gt=0, description="A session idle this long is closed.")
    session_lifetime_s: float = Field(
        default=3600.0, gt=0, description="A session's deadline (its sandbox's wall_timeout_s when it is one)."
    )
    pool_enabled: bool = Field(default=True, description="Whether a run may take a pre-started sandbox.")
    read_only_mounts: tuple[ResolvedMount, ...] = Field(
        default=(),
        description="Host directories mounted read-only: a CI job's runner externals at /__e, for a request that "
        "asks for them (none otherwise; a profile file never names one).",
    )
    profile_hash: str = Field(
        default="",
        pattern=r"^([0-9a-f]{64})?$",
        description="sha256 of this resolved profile (see above; computed when omitted, checked when given).",
    )
    definition_sha256: str = Field(
        default="",
        pattern=r"^([0-9a-f]{64})?$",
        description="The definition of the profile this was resolved from (models.definition_sha256; empty when "
        "not made by resolve). Not part of profile_hash: two definitions that resolve alike run alike; it tells a "
        "resolution made before a profile changed from one made after (the pool fills no key of an old one).",
    )

    @model_validator(mode="after")
    def _invariants_and_hashes(self) -> ResolvedProfile:
        if self.memory_swap_bytes != self.memory_bytes:
            raise ValueError("memory_swap_bytes must equal memory_bytes (no swap)")
        seccomp_sha256 = sha256_hex(self.seccomp_json.encode("utf-8"))
        if not self.seccomp_sha256:
            object.__setattr__(self, "seccomp_sha256", seccomp_sha256)  # computed once, at construction
        elif self.seccomp_sha256 != seccomp_sha256:
            raise ValueError("seccomp_sha256 does not match seccomp_json")
        profile_hash = self.compute_hash()
        if not self.profile_hash:
            object.__setattr__(self, "profile_hash", profile_hash)
        elif self.profile_hash != profile_hash:
            raise ValueError("profile_hash does not match the resolved profile")
        return self

    def compute_hash(self) -> str:
        """sha256 of the canonical JSON of every field but ``profile_hash``, ``seccomp_json`` and
        ``definition_sha256``."""
        return canonical_sha256(self.model_dump(mode="json", exclude=set(_HASH_EXCLUDED)))

    def with_read_only_mounts(self, mounts: tuple[ResolvedMount, ...]) -> ResolvedProfile:
        """This profile with ``mounts`` too (a new hash: the evidence names what was launched)."""
        if not mounts:
            return self
        fields: dict[str, Any] = self.model_dump()
        fields.update(read_only_mounts=(*self.read_only_mounts, *mounts), profile_hash="")
        return ResolvedProfile.model_validate(fields)

    @property
    def user(self) -> str:
        """``"uid:gid"`` as Docker's ``user=`` wants it."""
        return f"{self.uid}:{self.gid}"

    @property
    def nano_cpus(self) -> int:
        """Docker ``NanoCpus``."""
        return round(self.cpus * 1_000_000_000)
