"""The orchestrator's YAML config: one file, sections safety / approvals / evidence."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from orchestrator.approvals.auto import AutoApprove
from orchestrator.approvals.rules import ApprovalRule, GrantOutcome
from orchestrator.backends.kubernetes.settings import KubernetesSettings
from orchestrator.egress.runs import EgressSettings
from orchestrator.gate.config import SafetyConfig, default_safety_config, with_defaults
from orchestrator.profiles import ProfileCaps
from orchestrator.profiles.models import ProfileName
from orchestrator.yamlfile import load_yaml_mapping, validate


class ApprovalsSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    provider: Literal["auto", "none", "rules", "terminal", "queue"] = Field(
        default="auto",
        description="Who answers 'ask': rules (below), terminal (only with a TTY), queue (SQLite store), none;"
        " auto = terminal when stdin is a TTY, else none (asks fail fast).",
    )
    rules: list[ApprovalRule] = Field(
        default_factory=list,
        description="For provider: rules; with provider: queue, tried first (what no rule matches waits in the queue).",
    )
    default: GrantOutcome = Field(default="denied", description="For provider: rules, when no rule matches.")
    queue_path: str | None = Field(default=None, description="For provider: queue; default in the state dir.")
    auto_approve: AutoApprove = Field(
        default_factory=AutoApprove,
        description="Asks approved without anyone (approver 'auto'), per tenant or tool: whatever the provider.",
    )


class EvidenceSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    path: str | None = Field(default=None, description="Evidence JSONL file (default: state dir).")


_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # also a directory name: a tenant's workspaces live under it


class TokenEntry(BaseModel):
    """One bearer token. Its secret comes from exactly one of token / token_file / token_env, so that a
    Kubernetes Secret can supply it as a mounted file or an environment variable."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    subject: str = Field(min_length=1, max_length=128, pattern=_NAME, description="Who the token is.")
    role: Literal["agent", "approver", "admin"] = Field(description="agent | approver | admin")
    tenants: list[Annotated[str, Field(pattern=_NAME)]] = Field(
        default_factory=list, description="The tenants it acts for (agent: exactly one; admin: all, leave empty)."
    )
    token: str | None = Field(default=None, min_length=16, description="The secret itself (prefer a file or env).")
    token_file: str | None = Field(default=None, description="A file holding the secret (first line).")
    token_env: str | None = Field(default=None, description="An environment variable holding the secret.")

    @model_validator(mode="after")
    def _one_source(self) -> TokenEntry:
        sources = [s for s in (self.token, self.token_file, self.token_env) if s is not None]
        if len(sources) != 1:
            raise ValueError("give exactly one of token, token_file, token_env")
        if self.role == "agent" and len(self.tenants) != 1:
            raise ValueError("an agent token acts for exactly one tenant")
        if self.role == "approver" and not self.tenants:
            raise ValueError("an approver token names the tenants it decides for")
        if self.role == "admin" and self.tenants:
            raise ValueError("an admin token acts for every tenant: leave tenants empty")
        return self


class ServiceLimits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024, description="413 past it.")
    rate_per_s: float = Field(default=200.0, gt=0, description="Requests per second per token (429 past it).")
    burst: int = Field(default=400, ge=1, description="Requests a token may send at once before the rate applies.")
    max_wait_s: float = Field(default=600.0, gt=0, le=86400, description="The longest ?wait= honoured.")
    max_page: int = Field(default=200, ge=1, le=1000, description="The most items a listing returns.")
    header_timeout_s: float = Field(default=10.0, gt=0, description="A client must send its headers within this.")
    body_timeout_s: float = Field(default=30.0, gt=0, description="... and its whole body within this.")
    max_pending_connections: int = Field(
        default=256, ge=1, description="Connections waiting for their headers at once (the newest beyond are closed)."
    )
    max_sessions_per_tenant: int = Field(
        default=8, ge=0, le=10_000, description="Open interactive sessions per tenant (SESSION.LIMIT past it)."
    )
    ci_job_idle_s: float = Field(
        default=3600.0,
        ge=60,
        le=7 * 86400,
        description="An open CI job with no step running or asked about for this long is closed as its cleanup would"
        " (its runner is gone: an ephemeral runner never comes back to it).",
    )


class ServiceSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tokens: list[TokenEntry] = Field(default_factory=list, description="Who may call the service.")
    store: str | None = Field(default=None, description="SQLite state database (default: state dir/service.db).")
    workspaces: str | None = Field(
        default=None, description="Root of the tenants' workspaces: <root>/<tenant>/<session or 'default'>."
    )
    workspace_owner: str = Field(
        default="1000:1000", pattern=r"^\d+:\d+$", description="uid:gid new workspaces belong to (the profiles' user)."
    )
    allow_self_approval: bool = Field(default=False, description="May an approver approve what it submitted itself.")
    limits: ServiceLimits = Field(default_factory=ServiceLimits)


#: the most sandboxes one key may keep ready or filling (a profile's max_ready)
MAX_READY_LIMIT = 1024


class PoolBounds(BaseModel):
    """``pool.profiles.<profile>``: the floor and ceiling of each key of that profile (unset: the pool's own)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    min_ready: int | None = Field(
        default=None,
        ge=0,
        le=MAX_READY_LIMIT,
        description="Sandboxes kept ready or filling for each key of this profile once a run used it (default: "
        "pool.min_ready).",
    )
    max_ready: int | None = Field(
        default=None,
        ge=1,
        le=MAX_READY_LIMIT,
        description="The most kept ready or filling for each key of this profile, however high the demand (default:"
        " pool.max_ready).",
    )


@dataclass(frozen=True, slots=True)
class KeyBounds:
    """What one key of a profile keeps: ``floor`` <= ready + filling <= ``ceiling`` (within max_total)."""

    floor: int
    ceiling: int


class PoolSettings(BaseModel):
    """``pool:`` in the config: pre-started sandboxes (off unless enabled), sized per key by its demand
    (pipeline/pool_sizing.py) between a floor and a ceiling, the pool's own or its profile's."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    enabled: bool = Field(default=False, description="Pre-start sandboxes for the keys runs use.")
    min_ready: int = Field(
        default=1,
        ge=0,
        le=MAX_READY_LIMIT,
        description="Sandboxes kept ready or filling for each key once a run used it, however low the demand.",
    )
    max_ready: int = Field(
        default=4,
        ge=1,
        le=MAX_READY_LIMIT,
        description="The most kept ready or filling for each key, however high the demand.",
    )
    per_key: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Earlier releases' fixed size: min_ready and max_ready both (not together with either).",
    )
    max_total: int = Field(default=16, ge=1, le=1024, description="Ready (and filling) sandboxes, all keys.")
    ttl_s: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="An unclaimed sandbox is destroyed after this; a key no run used for this long is filled no more.",
    )
    shrink_after_s: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="How long a key's busiest moment is remembered: sandboxes filled for it are retired this long "
        "after it (down to the floor).",
    )
    profiles: dict[ProfileName, PoolBounds] = Field(
        default_factory=dict,
        description="Per profile: its keys' own min_ready and max_ready.",
    )

    @model_validator(mode="after")
    def _bounds_hold(self) -> PoolSettings:
        """Each floor is within its ceiling and within max_total, whichever of the pool's or a profile's each
        comes from; per_key stands for both of the pool's, never beside them."""
        both = {"min_ready", "max_ready"} & self.model_fields_set
        if self.per_key is not None and both:
            raise ValueError(
                f"pool.per_key is min_ready and max_ready at once (the fixed size of earlier releases): give"
                f" either per_key or {' and '.join(sorted(both))}"
            )
        for profile in [None, *sorted(self.profiles)]:
            bounds = self.bounds(profile)
            floor, ceiling = self._bound_fields(profile)
            if bounds.floor > bounds.ceiling:
                raise ValueError(f"{floor} {bounds.floor} is above {ceiling} {bounds.ceiling}")
            # per_key meant "up to per_key, within max_total": a config of earlier releases still loads
            if bounds.floor > self.max_total and floor != "pool.per_key":
                raise ValueError(f"{floor} {bounds.floor} is above pool.max_total {self.max_total} (all keys together)")
        return self

    def _bound_fields(self, profile: str | None) -> tuple[str, str]:
        """Where the floor and the ceiling of ``profile``'s keys come from, as the config names them."""
        own = self.profiles.get(profile) if profile is not None else None
        pool = ("pool.per_key", "pool.per_key") if self.per_key is not None else ("pool.min_ready", "pool.max_ready")
        floor = f"pool.profiles.{profile}.min_ready" if own is not None and own.min_ready is not None else pool[0]
        ceiling = f"pool.profiles.{profile}.max_ready" if own is not None and own.max_ready is not None else pool[1]
        return floor, ceiling

    def bounds(self, profile: str | None) -> KeyBounds:
        """The floor and ceiling of a key of ``profile`` (None: the pool's own, for profiles not listed)."""
        floor, ceiling = (self.per_key, self.per_key) if self.per_key is not None else (self.min_ready, self.max_ready)
        own = self.profiles.get(profile) if profile is not None else None
        if own is not None:
            floor = own.min_ready if own.min_ready is not None else floor
            ceiling = own.max_ready if own.max_ready is not None else ceiling
        return KeyBounds(floor, ceiling)


#: The Kubernetes workspace modes pre-started pods work with (its capabilities.can_pool): a pooled pod runs
#: its command on the workspace mounted; in copy mode the workspace would be the one copied in at fill.
POOL_WORKSPACE_MODES: tuple[str, ...] = ("pvc",)


def pool_workspace_refusal(pool_enabled: str, workspace_mode: str) -> str:
    """Why pool.enabled is refused with any other workspace mode, naming the two fields as the reader knows
    them: the config's (its validator below) or the chart's values (its values.schema.json, generated by
    scripts/gen_chart_schema.py)."""
    return (
        f"{pool_enabled}: pre-started pods need {workspace_mode} {' or '.join(POOL_WORKSPACE_MODES)} (in copy"
        " mode the workspace is copied into a pod as it starts, long before a run takes it)"
    )


class BackendSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    kind: Literal["docker", "kubernetes"] = Field(
        default="docker", description="Where sandboxes run: the Docker engine, or pods on a Kubernetes cluster."
    )
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings, description="kind: kubernetes.")


class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    safety: SafetyConfig = Field(default_factory=default_safety_config)
    approvals: ApprovalsSection = Field(default_factory=ApprovalsSection)
    evidence: EvidenceSection = Field(default_factory=EvidenceSection)
    service: ServiceSection = Field(default_factory=ServiceSection, description="`sandboxctl serve` only.")
    backend: BackendSection = Field(default_factory=BackendSection)
    pool: PoolSettings = Field(
        default_factory=PoolSettings, description="Pre-started sandboxes (off unless enabled; see pipeline/pool.py)."
    )
    egress: EgressSettings = Field(
        default_factory=EgressSettings,
        description="The egress proxy of runs whose profile (or approved request) reaches hosts: its resolver "
        "and what it never connects to.",
    )
    caps: ProfileCaps | None = Field(
        default=None,
        description="Policy caps: the most any profile may get (memory, cpus, pids, wall time, output,"
        " runtimes, images); the effective profile is the narrowest of profile, request and these.",
    )

    @field_validator("pool")
    @classmethod
    def _pool_needs_mounted_workspaces(cls, pool: PoolSettings, info: ValidationInfo) -> PoolSettings:
        """Refused at start (CONFIG.INVALID at pool), not left to a warning and cold runs: backend is declared
        before pool, so it is validated (and in info.data) by now unless it is invalid itself."""
        backend = info.data.get("backend")
        if (
            pool.enabled
            and isinstance(backend, BackendSection)
            and backend.kind == "kubernetes"
            and backend.kubernetes.workspace.mode not in POOL_WORKSPACE_MODES
        ):
            raise ValueError(pool_workspace_refusal("pool.enabled", "backend.kubernetes.workspace.mode"))
        return pool

    @model_validator(mode="after")
    def _workspaces_on_the_claim(self) -> OrchestratorConfig:
        """pvc mode: a pod can only mount a sub-path of the claim, so the service's workspaces must be below
        the claim's root (else every execution would be refused)."""
        k8s = self.backend.kubernetes
        workspaces = self.service.workspaces
        if self.backend.kind != "kubernetes" or k8s.workspace.mode != "pvc" or workspaces is None:
            return self
        root, path = posixpath.normpath(k8s.workspace.root), posixpath.normpath(workspaces)
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            raise ValueError(
                f"service.workspaces {workspaces!r} is not below backend.kubernetes.workspace.root {root!r}:"
                " pods mount sub-paths of the claim only"
            )
        return self


#: Every field that names a file or directory of this host. A relative one counts from the directory of the
#: config file that holds it (never from the current directory: `sandboxctl approvals --config ../A/svc.yaml`
#: must find the store `sandboxctl serve --config svc.yaml` uses in A). backend.kubernetes.workspace.root and
#: egress.netns must be absolute already; safety.trusted_program_dirs are directories inside the sandbox.
HOST_PATH_FIELDS: tuple[tuple[str, ...], ...] = (
    ("approvals", "queue_path"),
    ("evidence", "path"),
    ("service", "store"),
    ("service", "workspaces"),
    ("service", "tokens", "*", "token_file"),
    ("backend", "kubernetes", "kubeconfig"),
)


def _anchored(value: Any, loc: tuple[str, ...], base: str) -> Any:
    """``value`` with the relative path at ``loc`` ("*": every item of a list) made absolute below ``base``;
    anything of another shape is left for validation to refuse."""
    if not loc:
        if isinstance(value, str) and value and not os.path.isabs(value):
            return os.path.normpath(os.path.join(base, value))
        return value
    head, rest = loc[0], loc[1:]
    if head == "*":
        return [_anchored(item, rest, base) for item in value] if isinstance(value, list) else value
    if isinstance(value, dict) and head in value:
        return {**value, head: _anchored(value[head], rest, base)}
    return value


def anchor_paths(data: dict[str, Any], config_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The config's host paths (HOST_PATH_FIELDS) made absolute: a relative one counts from ``config_dir``."""
    base = os.path.abspath(config_dir)
    for loc in HOST_PATH_FIELDS:
        data = _anchored(data, loc, base)
    return data


def load_config(path: Path | None) -> OrchestratorConfig:
    """The whole config, validated (CONFIG.INVALID names file, line, field). None: built-in defaults.
    The safety section is layered over the built-in policy (see gate.config.with_defaults). A relative path
    in it counts from the file's own directory (HOST_PATH_FIELDS), whatever the current directory."""
    if path is None:
        return OrchestratorConfig()
    data, located = load_yaml_mapping(path)
    data = anchor_paths({**data, "safety": with_defaults(data.get("safety"))}, os.path.dirname(os.path.abspath(path)))
    return validate(OrchestratorConfig, data, located, str(path))
