"""The answers to a platform team's questions about a profile's runs — what they used (``UsageReport``),
what limits they call for (``Recommendation``), what a change would have done (``WhatIfReport``) — as models:
the HTTP API's bodies, ``sandboxctl profiles usage | recommend | whatif --json``, and what the Python client
returns. Frozen, no extra field, every field described. Computed by ``orchestrator.profiles.usage_report``,
``recommend`` and ``whatif`` (docs/profiles.md, "Usage and recommendations").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from orchestrator.domain.usage import WINDOW_PATTERN, EndCause

Number = int | float
"""A measure's value or a limit: bytes and counts stay integers in JSON, seconds and cores are floats."""


class Output(BaseModel):
    """Base of every output model: immutable, and a field it does not know is an error. Built when first used
    (``defer_build``), as the profile models are: a CLI command that never answers with one never pays for it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Percentiles(Output):
    """Nearest-rank percentiles of a set of values (see ``nearest_rank``), and its largest value."""

    count: int = Field(description="How many values they are taken over.")
    p50: Number = Field(description="The median (nearest rank).")
    p90: Number = Field(description="The 90th percentile (nearest rank).")
    p95: Number = Field(description="The 95th percentile (nearest rank).")
    p99: Number = Field(description="The 99th percentile (nearest rank).")
    max: Number = Field(description="The largest value.")


class RunList(Output):
    """Some runs, named: every one counted, the first ``MAX_IDS`` (in the order met) named."""

    total: int = Field(description="How many runs.")
    execution_ids: tuple[str, ...] = Field(description="The execution ids of the first of them (at most 20).")


GroupBy = Literal["tenant", "tool", "ci_repository"]


class MeasureSummary(Output):
    """One measure over a group's runs."""

    measure: str = Field(description="The measure's name (domain.usage.MEASURES).")
    unit: str = Field(description="s, cores, bytes or count.")
    description: str = Field(description="What it is, in a few words.")
    limit_key: str = Field(description="The profile `limits:` key it is held against.")
    known: int = Field(description="Runs with this measure known.")
    unknown: int = Field(description="Runs without it (a backend that could not read it, a run that never ran).")
    percentiles: Percentiles | None = Field(description="Over the known values; null when none is known.")
    limit: Number | None = Field(description="The profile's limit as it is now; null when not given.")
    max_of_limit: float | None = Field(description="The largest known value ÷ the limit (1.0: at the limit).")
    ended_at_limit: int | None = Field(
        description="Runs that ended at this limit (its end cause; for stdout/stderr and the two write budgets, "
        "only runs whose value was at their limit or unknown); null for CPU, which is throttled, never ended."
    )


class UsageGroup(Output):
    """The runs of one tenant, tool or CI repository (or all of them)."""

    group: str = Field(description="The tenant, tool or CI repository ('' when the run had none), or 'all'.")
    runs: int = Field(description="How many runs.")
    measures: tuple[MeasureSummary, ...] = Field(description="One per measure, in domain.usage.MEASURES order.")
    ended: dict[str, int] = Field(description="Runs per end cause: every cause, zeros included.")


class UsageReport(Output):
    """What the runs of ``profile`` that ended in [since, until] used."""

    profile: str = Field(description="The profile.")
    since: float | None = Field(description="Start of the window (unix seconds); null: since the first run.")
    until: float = Field(description="End of the window (unix seconds).")
    group_by: GroupBy | None = Field(description="What the runs are grouped by; null: one group, 'all'.")
    runs: int = Field(description="Runs counted, in every group.")
    ignored: int = Field(description="Rows given that were of another profile or outside the window.")
    groups: tuple[UsageGroup, ...] = Field(
        description="Largest group first (then by name); past 50, the smallest merged into the last, '(other)'."
    )
    groups_merged: int = Field(default=0, description="How many groups the last one, '(other)', merges (0: none).")


Confidence = Literal["none", "low", "medium", "high"]


Change = Literal["raise", "lower", "keep"]


class RuleInputs(Output):
    """What a rule was given and found."""

    known: int = Field(
        description="Samples: runs with the measure known, or OOM-killed / stopped at the pids limit (a lower bound); "
        "for wall_timeout_s timed-out runs are no sample (see floor)."
    )
    unknown: int = Field(
        description="Runs without a sample: the measure unknown; memory: a run at 95 % of its own limit without an "
        "OOM kill (page cache reclaimed there); wall_timeout_s: a run timed out under a narrower limit than now."
    )
    at_limit: int = Field(
        description="Runs that ended at this limit (OOM kill, pids limit, timeout); for cpus, runs that used at "
        "least 95 % of theirs (throttled)."
    )
    percentiles: Percentiles | None = Field(
        description="Of the samples: the known values, an OOM-killed or pids-stopped run counted as its limit bumped."
    )
    margin: float = Field(description="The fraction added to the percentile (0.15: +15 %).")
    floor: Number | None = Field(
        description="The largest sample of a run ended at the limit, which the value never goes below (memory, "
        "pids: before the margin); for wall_timeout_s the current limit when runs timed out at it (or a wider "
        "one); null: none."
    )
    cross_checks: dict[str, Number] = Field(
        description="What other rules would give, for comparison (not rounded): vpa_target (p90 + 15 %), "
        "krr_max_plus_15pct (the largest sample + 15 %)."
    )


class ResourceRecommendation(Output):
    """The recommendation for one profile ``limits:`` key."""

    key: str = Field(description="The profile `limits:` key: cpus, memory, pids, wall_timeout_s.")
    unit: str = Field(description="cores, bytes, count or s.")
    current: Number = Field(description="The profile's value now.")
    recommended: Number | None = Field(description="The value the rule gives; null when confidence is none.")
    change: Change | None = Field(description="raise, lower or keep; null without a value.")
    confidence: Confidence = Field(
        description="none (fewer than min_runs samples: no value), low (under 100), medium (under 500), high."
    )
    rule: str = Field(description="The rule's stable id (docs/profiles.md, Recommendations), or too_few_runs.")
    rule_text: str = Field(description="The rule in one line.")
    reason: str | None = Field(description="Why there is no value (too few runs); null otherwise.")
    inputs: RuleInputs = Field(description="What the rule used.")


class Recommendation(Output):
    """Limits for ``profile`` from its recorded runs."""

    profile: str = Field(description="The profile.")
    runs: int = Field(description="Runs of the profile looked at.")
    min_runs: int = Field(description="Samples a resource needs for a value.")
    resources: tuple[ResourceRecommendation, ...] = Field(description="cpus, memory, pids, wall_timeout_s.")
    patch: dict[str, str | int | float] = Field(
        description="The changed `limits:` keys in the profile files' own form (memory: '704m'); empty: no change."
    )
    notes: tuple[str, ...] = Field(description="What the figures cannot say (throttled CPU, output cut at a cap).")

    def yaml_patch(self) -> str:
        """``patch`` as the ``limits:`` section of a profile file (an override that ``extends`` the profile
        merges it); ``limits: {}`` when nothing changes."""
        if not self.patch:
            return "limits: {}\n"
        return "".join(["limits:\n", *(f"  {key}: {value}\n" for key, value in self.patch.items())])


class NodeSize(Output):
    """A node's allocatable size, for how many runs it holds at once."""

    cpus: float = Field(gt=0, le=1_000_000, allow_inf_nan=False, description="Allocatable CPU cores.")
    memory_bytes: int = Field(gt=0, le=2**62, description="Allocatable memory in bytes.")


class NodeCapacity(Output):
    """Runs a node holds at once, each requesting its limits: floor(min(node cpus ÷ cpus, node memory ÷ memory))."""

    node: NodeSize = Field(description="The node.")
    current: int = Field(description="At the current cpus and memory.")
    proposed: int = Field(description="At the proposed cpus and memory.")
    gain: int = Field(description="proposed - current (negative: fewer).")


class LimitReplay(Output):
    """The runs replayed against one proposed limit."""

    key: str = Field(description="The profile `limits:` key.")
    current: Number = Field(description="The profile's value now.")
    proposed: Number = Field(description="The proposed value.")
    ends_as: EndCause = Field(description="What a run meeting it meets: oom, wall_timeout, pids_limit, …")
    kills: bool = Field(description="Whether meeting it ends the run (false for an output cap: output is cut).")
    would_meet: RunList = Field(description="Runs that would meet it (known from what they reached).")
    already: int = Field(description="Of those, the runs that ended at this limit in the record too.")
    unknown: RunList = Field(
        description="Runs whose outcome cannot be known: the measure unknown, or a run that ended at a limit the "
        "proposal raises (at this one: its need is unknown; at another: it would have gone on)."
    )
    within: int = Field(description="Runs known to stay within it.")
    used_of_limit: Percentiles | None = Field(
        description="Of the runs within: value ÷ proposed limit (0.5: half used; headroom is 1 - it)."
    )


class CpuReplay(Output):
    """The runs replayed under proposed cpus: slower, never killed."""

    current: float = Field(description="The profile's cpus now.")
    proposed: float = Field(description="The proposed cpus.")
    known: int = Field(description="Runs with the cores they used known.")
    unknown: RunList = Field(description="Runs without (CPU time or wall time unknown).")
    slower: RunList = Field(description="Runs that used more cores than proposed: throttled, so slower.")
    would_time_out_estimated: RunList = Field(
        description="Of those, the runs whose wall time x (used ÷ proposed cores) reaches their wall timeout: an "
        "estimate (CPU-bound work slows in proportion; waiting on I/O does not)."
    )
    used_of_limit: Percentiles | None = Field(description="Cores used ÷ proposed cpus, over the known runs.")


class WhatIfReport(Output):
    """``profile``'s recorded runs replayed under ``proposed``."""

    profile: str = Field(description="The profile.")
    runs: int = Field(description="Runs replayed.")
    proposed: dict[str, Number] = Field(description="The proposed limits, validated (sizes in bytes).")
    current: dict[str, Number] = Field(description="The same keys as they are now.")
    limits: tuple[LimitReplay, ...] = Field(description="One per proposed key but cpus, in profile key order.")
    cpu: CpuReplay | None = Field(description="When cpus is proposed.")
    node: NodeCapacity | None = Field(description="When a node size is given.")
    notes: tuple[str, ...] = Field(description="What the figures rest on.")


_MIB, _GIB, _TIB = 2**20, 2**30, 2**40


def _absent(schema: dict[str, Any]) -> None:
    """A key left out is no proposal for it: the document says no default (null is not a value here)."""
    schema.pop("default", None)


class LimitsProposal(Output):
    """Proposed ``limits:`` values, each in its unit (bytes, cores, seconds, a count) and within the profile
    schema's bounds (``profiles.models.Limits``; a test holds the two together); at least one."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, json_schema_extra={"minProperties": 1})

    cpus: Annotated[float, Field(gt=0, le=256)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="CPU cores."
    )
    memory: Annotated[int, Field(ge=6 * _MIB, le=_TIB)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="Memory in bytes."
    )
    pids: Annotated[int, Field(ge=8, le=1_000_000)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="Processes and threads."
    )
    wall_timeout_s: Annotated[float, Field(gt=0, le=86_400)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="Wall-clock deadline in seconds."
    )
    stdout_max_bytes: Annotated[int, Field(ge=1, le=_GIB)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="stdout cap in bytes."
    )
    stderr_max_bytes: Annotated[int, Field(ge=1, le=_GIB)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="stderr cap in bytes."
    )
    workspace_write_bytes: Annotated[int, Field(ge=0, le=64 * _TIB)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="Workspace write budget in bytes."
    )
    workspace_write_files: Annotated[int, Field(ge=0, le=10_000_000)] | SkipJsonSchema[None] = Field(
        default=None, json_schema_extra=_absent, description="Workspace write budget in entries."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        """A key given is a value (null is no limit: the document says so too)."""
        if isinstance(data, dict):
            nulls = sorted(key for key, value in data.items() if value is None)
            if nulls:
                raise ValueError(f"{', '.join(nulls)}: a value, not null")
            if not data:
                raise ValueError("propose at least one limit")
        return data

    def given(self) -> dict[str, Number]:
        """The proposed keys and values."""
        return {key: value for key, value in self.model_dump().items() if value is not None}


class WhatIfProposal(Output):
    """A proposed change of a profile's limits, replayed over its recorded runs (``POST …/whatif``)."""

    set: LimitsProposal = Field(description="The proposed limits: {'memory': 536870912, 'cpus': 1}.")
    since: str | None = Field(
        default=None, pattern=f"^(?:{WINDOW_PATTERN})$", description="The window: 30m, 12h, 7d (default), 2w."
    )
    node: NodeSize | None = Field(default=None, description="A node's allocatable size: the runs it holds at once.")


# -- the profiles page (``GET /v1/profiles``, ``GET /v1/profiles/{name}/distribution``) -----------------------
class ProfileLimits(Output):
    """A profile in force, with the limits a run of it gets now (the config's caps applied)."""

    name: str = Field(description="The profile's name.")
    default: bool = Field(description="Whether a request that names no profile runs with it.")
    limits: dict[str, Number] | None = Field(
        description="Its `limits:` keys that usage speaks to (cpus, memory in bytes, pids, wall_timeout_s, "
        "stdout_max_bytes, stderr_max_bytes, workspace_write_bytes, workspace_write_files); null when it does "
        "not resolve under the caps."
    )
    error: str | None = Field(description="Why it does not resolve (the error's code); null when it does.")


class ProfileList(Output):
    """The profiles in force, by name."""

    profiles: tuple[ProfileLimits, ...] = Field(description="Sorted by name.")


class Histogram(Output):
    """One measure's known values over the window's runs, counted in buckets of one round width from 0: at most
    ``MAX_BUCKETS`` of them, up to the first edge at or above the largest of the limit, the recommended value
    and the largest value (so that both lines fall on the chart). The width is a power of two for bytes, and 1,
    2 or 5 x a power of ten for seconds and cores. A bucket holds [its left edge, its right edge); the last
    one also its right edge."""

    measure: str = Field(description="memory_peak_bytes, cores, cpu_seconds or wall_seconds.")
    unit: str = Field(description="bytes, cores or s.")
    description: str = Field(description="What it is, in a few words.")
    limit_key: str = Field(description="The profile `limits:` key it is held against (cpus for CPU seconds too).")
    edges: tuple[Number, ...] = Field(description="The buckets' edges, from 0: one more than counts.")
    counts: tuple[int, ...] = Field(description="Runs whose value falls in each bucket.")
    known: int = Field(description="Runs with this measure known (the sum of counts).")
    unknown: int = Field(description="Runs without it: never counted as 0.")
    max: Number | None = Field(description="The largest known value; null when none is known.")
    limit: Number | None = Field(
        description="The profile's limit now (CPU seconds: its cpus x its wall timeout); null for a profile gone."
    )
    recommended: Number | None = Field(
        description="What the recommendation gives for limit_key (CPU seconds: recommended cpus x recommended "
        "wall timeout), as GET .../recommendation with the same since and min_runs; null when it gives none."
    )
    recommended_rule: str | None = Field(description="The rule that gave it (docs/profiles.md); null without one.")


class RunAtLimit(Output):
    """A run that ended at one of its limits."""

    execution_id: str = Field(description="The execution (its evidence: GET /v1/evidence?execution_id=).")
    cause: EndCause = Field(description="oom, wall_timeout, pids_limit, write_budget or output_cap.")
    ended_at: float = Field(description="When it ended (unix seconds).")
    tenant: str = Field(description="Its tenant.")
    measure: str = Field(description="The measure held against that limit (stdout or stderr, bytes or files: the "
                         "one at its limit, else the first).")  # fmt: skip
    value: Number | None = Field(description="What the run reached of it; null when unknown.")
    limit: Number = Field(description="The limit the run had.")


class RunsAtLimit(Output):
    """The window's runs that ended at a limit, newest first."""

    total: int = Field(description="How many, in all.")
    by_cause: dict[str, int] = Field(description="How many per end cause (every limit's cause, zeros included).")
    runs: tuple[RunAtLimit, ...] = Field(description="The newest of them (at most 50).")


class ProfileDistribution(Output):
    """How ``profile``'s runs that ended in [since, until] spread against its limits: what the profiles page
    draws. Computed in the store (SQL), so 100,000 runs answer in a fraction of a second."""

    profile: str = Field(description="The profile.")
    since: float = Field(description="Start of the window (unix seconds).")
    until: float = Field(description="End of the window (unix seconds).")
    runs: int = Field(description="Runs in the window (of the caller's tenants).")
    min_runs: int = Field(description="Samples a recommended value needs.")
    histograms: tuple[Histogram, ...] = Field(description="memory_peak_bytes, cores, cpu_seconds, wall_seconds.")
    ended_at_limit: RunsAtLimit = Field(description="The runs that ended at a limit.")
