"""Conditions over a sanitized request, shared by policy rules and approval rules."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from orchestrator.domain.ci import CI_FIELDS, CiProvider, CiRecord
from orchestrator.domain.globs import check_glob, compile_glob
from orchestrator.domain.requests import ALL_TOOLS, EXEC_TOOLS
from orchestrator.domain.sanitized import RiskLevel, RiskLevelName, SanitizedRequest
from orchestrator.gate.commands import CommandPattern, ParsedCommand, parse_command, program_name
from orchestrator.gate.env_keys import changes_programs
from orchestrator.gate.intent import ShellAnalysis
from orchestrator.gate.programs import Family, lookup

WILDCARD = "*"

TOOL_GROUPS: dict[str, frozenset[str]] = {
    "exec": EXEC_TOOLS,
    "files": frozenset({"file_write", "apply_patch"}),
    "stdin": frozenset({"write_stdin"}),
}


def expand_tools(names: Sequence[str]) -> frozenset[str]:
    out: set[str] = set()
    for name in names:
        out |= TOOL_GROUPS.get(name, frozenset({name}))
    return frozenset(out)


def check_pattern(text: str) -> str:
    """A command pattern (``rm -rf``, ``mkfs*``) as the policy will use it: parsed now, at load time, so
    that a pattern it could not use is refused naming file, line and field, never when a request comes."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"cannot split command pattern: {err}") from None
    if not words:
        raise ValueError("command pattern is empty")
    try:
        pattern = CommandPattern.parse(text)
    except ValueError:
        # its message quotes the pattern; ours names the field only
        raise ValueError("command pattern has no program name (its first word must name a program)") from None
    if pattern.program == WILDCARD:
        check_glob(pattern.program_glob)
    return text


#: an fnmatch glob, checked when the config is loaded (the error names the list item)
GlobText = Annotated[str, AfterValidator(check_glob)]


def _one_or_more(value: object) -> object:
    """``event: push`` reads as ``event: [push]``."""
    return [value] if isinstance(value, str) else value


def _one_or_more_schema(item: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [item, {"type": "array", "items": item, "minItems": 1}]})


#: a CI condition's globs: one, or a list of them (any may match)
CiGlobs = Annotated[
    list[GlobText], BeforeValidator(_one_or_more), Field(min_length=1), _one_or_more_schema({"type": "string"})
]
CiProviders = Annotated[
    list[CiProvider],
    BeforeValidator(_one_or_more),
    Field(min_length=1),
    _one_or_more_schema({"enum": list(get_args(CiProvider))}),
]
#: CI values the forges compare without case (GitHub and GitLab names of repositories, users): so are the globs
CASELESS_CI_FIELDS = frozenset({"repository", "action", "actor"})


class CiConditions(BaseModel):
    """A rule's ``ci:`` condition: what a request's CI context (``domain.ci.CiContext``) must hold. Every field
    given must hold, and one of its globs (fnmatch, as ``subject``) match the request's value; a request without
    CI context, or without the value a field asks about, never matches. ``repository``, ``action`` and ``actor``
    are matched without regard to case (the forges name them so); the others exactly."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    provider: CiProviders | None = Field(default=None, description="github | gitlab (one, or a list).")
    repository: CiGlobs | None = Field(default=None, description="owner/name or group/…/project globs: 'org/*'.")
    workflow: CiGlobs | None = Field(default=None, description="Workflow (GitHub) or pipeline name (GitLab) globs.")
    job: CiGlobs | None = Field(default=None, description="Job name globs.")
    stage: CiGlobs | None = Field(default=None, description="GitLab: the job's pipeline stage globs.")
    step: CiGlobs | None = Field(
        default=None, description="Step globs: GitHub's step id (GITHUB_ACTION), GitLab's run_exec stage."
    )
    action: CiGlobs | None = Field(default=None, description="GitHub: the uses: action, owner/name@ref globs.")
    ref: CiGlobs | None = Field(default=None, description="Ref globs: 'refs/heads/main', 'refs/tags/v*'.")
    event: CiGlobs | None = Field(
        default=None, description="Event globs: GitHub's event name, GitLab's pipeline source."
    )
    actor: CiGlobs | None = Field(default=None, description="Who started the run: user name globs.")


@dataclass(frozen=True, slots=True)
class CiMatcher:
    """A compiled ``ci:`` condition: (field, globs) for every field it names."""

    fields: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]

    @classmethod
    def compile(cls, cond: CiConditions) -> CiMatcher:
        fields = []
        for name in CI_FIELDS:
            globs = getattr(cond, name)
            if globs is None:
                continue
            caseless = name in CASELESS_CI_FIELDS
            fields.append((name, tuple(compile_glob(g.casefold() if caseless else g) for g in globs)))
        return cls(tuple(fields))

    def matches(self, ci: CiRecord | None) -> bool:
        if ci is None:
            return False
        for name, globs in self.fields:
            value = getattr(ci, name)
            if value is None:
                return False
            text = value.casefold() if name in CASELESS_CI_FIELDS else value
            if not any(g.match(text) for g in globs):
                return False
        return True


class MatchConditions(BaseModel):
    """Every condition given must hold; a condition left out means 'any'."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tool: list[str] | None = Field(
        default=None, description="Tool names or groups: exec, files, stdin (parity: prefer 'exec')."
    )
    argv_prefix: str | None = Field(
        default=None,
        description="Command pattern such as 'git push --force': program basename, flags in any spelling,"
        " then a positional prefix.",
    )
    argv_glob: str | None = Field(
        default=None, description="fnmatch glob over the command's words joined as a shell would quote them."
    )
    risk: list[RiskLevelName] | None = Field(default=None, description="Risk levels this applies to.")
    risk_at_least: RiskLevelName | None = Field(default=None, description="Minimum risk level.")
    risk_at_most: RiskLevelName | None = Field(default=None, description="Maximum risk level.")
    paths: list[GlobText] | None = Field(
        default=None, description="fnmatch globs over the request's paths (file_write, patch files, cwd)."
    )
    profile: list[str] | None = Field(default=None, description="Profile names this applies to.")
    complex: bool | None = Field(
        default=None,
        description="Only complex (true) or only simple (false). An allow rule stating true covers complex commands"
        " (every command must still match its command conditions).",
    )
    opaque: bool | None = Field(
        default=None,
        description="Only requests the gate cannot fully see (true: something unseen, an env key that changes what"
        " programs run, an opaque program given a shell) or only fully seen ones (false). An allow rule stating true"
        " covers that blindness and must have a ci: condition.",
    )
    tenant: list[str] | None = Field(default=None, description="Tenants this applies to.")
    subject: list[GlobText] | None = Field(default=None, description="Subjects (fnmatch globs) this applies to.")
    ci: CiConditions | None = Field(
        default=None,
        description="The request's CI context (provider, repository, workflow, job, stage, step, action, ref, event,"
        " actor: globs); a request without CI context never matches.",
    )

    @field_validator("tool")
    @classmethod
    def _known_tools(cls, tools: list[str] | None) -> list[str] | None:
        for name in tools or []:
            if name not in ALL_TOOLS and name not in TOOL_GROUPS:
                known = ", ".join([*ALL_TOOLS, *TOOL_GROUPS])
                raise ValueError(f"unknown tool {name!r} (known: {known})")
        return tools

    @field_validator("argv_prefix")
    @classmethod
    def _pattern(cls, text: str | None) -> str | None:
        return None if text is None else check_pattern(text)

    @field_validator("argv_glob")
    @classmethod
    def _glob(cls, glob: str | None) -> str | None:
        return None if glob is None else check_glob(glob)

    @model_validator(mode="after")
    def _risk_bounds_agree(self) -> MatchConditions:
        levels = [RiskLevel.parse(x) for x in self.risk or ()]
        low = RiskLevel.parse(self.risk_at_least) if self.risk_at_least else RiskLevel.LOW
        high = RiskLevel.parse(self.risk_at_most) if self.risk_at_most else RiskLevel.CRITICAL
        if low > high:
            raise ValueError("risk_at_least is above risk_at_most: the rule could never match")
        if self.risk is not None and not any(low <= level <= high for level in levels):
            raise ValueError("no level in risk lies between risk_at_least and risk_at_most: the rule could never match")
        return self


OPAQUE_TOKENS = re.compile(r"[\s;&|()<>`'\"$={},]+")
"""Where a word an opaque program is given may hold a command name (``sh -c 'a|sudo id'``)."""


def runs_commands(token: str) -> bool:
    """A shell or a program that runs another command: an opaque program given one runs what the
    gate cannot see (``docker run img sh -c …``, ``perf stat -- sh -c …``)."""
    program = lookup(program_name((token,)))
    return program is not None and program.family in (Family.SHELL, Family.WRAPPER)


def unseen_by_gate(analysis: ShellAnalysis | None, sanitized: SanitizedRequest) -> str | None:
    """What of the request the gate cannot see, or None when it established its complete intent: an env
    key from the request that changes what programs run or load, what the analysis lists as unseen, an
    opaque program given a shell or a program that runs commands. Every allow asks for it, but an allow
    rule stating ``opaque: true`` (which must name the CI context it trusts). A denylisted program among
    an opaque program's words is not here: the policy holds an allow for it always."""
    if analysis is None:
        return None
    for key in sanitized.env_keys:
        if changes_programs(key):
            return f"env {key} from the request changes what programs run or load"
    if analysis.unseen:
        more = f" (and {len(analysis.unseen) - 1} more)" if len(analysis.unseen) > 1 else ""
        return f"{analysis.unseen[0]}{more}"
    for program, words in analysis.opaque:
        if lookup(program) is not None:
            continue  # a wrapper's option values: only the denylist is looked for there
        for word in words:
            for token in OPAQUE_TOKENS.split(word):
                if token and runs_commands(token):
                    return f"'{program}' is opaque to the gate and {token!r}, which runs commands, is among its words"
    return None


def _glob_program(glob: str) -> str:
    head = glob.split(" ", 1)
    if len(head) == 2 and not any(ch in head[0] for ch in "*?[\\'\""):
        return head[0]
    return WILDCARD


class RequestFacts:
    """What rules look at, computed once per decision (commands parsed once, not once per rule)."""

    __slots__ = (
        "_blind",
        "_joined",
        "analysis",
        "commands",
        "is_complex",
        "parsed",
        "paths",
        "profile",
        "risk",
        "sanitized",
        "script_unread",
        "tool",
    )

    def __init__(self, sanitized: SanitizedRequest, analysis: ShellAnalysis | None, profile: str) -> None:
        self.sanitized = sanitized
        self.analysis = analysis
        self.tool = sanitized.tool
        self.profile = profile
        self.risk = RiskLevel.parse(sanitized.risk.risk_level)
        self.is_complex: bool | None = analysis.is_complex if analysis is not None else None
        self.commands: tuple[tuple[str, ...], ...] = analysis.commands if analysis is not None else ()
        self.parsed: tuple[ParsedCommand, ...] = tuple(parse_command(words) for words in self.commands)
        # '..' resolved, so 'src/../../etc/passwd' is matched as '../etc/passwd', never as 'src/*'
        self.paths = [posixpath.normpath(p) for p in request_paths(sanitized)]
        self._joined: tuple[str, ...] | None = None
        self._blind: tuple[str | None] | None = None
        # a script whose commands this analysis does not hold (binary, too long, or only its digest at hand: an
        # approval rule's sanitized form): no rule can say every command matches
        self.script_unread = sanitized.script is not None and not (analysis is not None and analysis.script_readers)

    @property
    def blind(self) -> str | None:
        """What the gate cannot see of the request (``unseen_by_gate``), or None: computed once."""
        if self._blind is None:
            self._blind = (unseen_by_gate(self.analysis, self.sanitized),)
        return self._blind[0]

    def joined(self) -> tuple[str, ...]:
        """Each command as the shell would quote it, argv[0] as its basename (for argv_glob)."""
        if self._joined is None:
            self._joined = tuple(
                shlex.join([p.program, *words[1:]]) for p, words in zip(self.parsed, self.commands, strict=True)
            )
        return self._joined

    def index_keys(self) -> frozenset[tuple[str, str | None]]:
        """(program, None) and (program, first positional) for every command: the rule index keys."""
        keys: set[tuple[str, str | None]] = set()
        for p in self.parsed:
            keys.add((p.program, None))
            if p.positionals:
                keys.add((p.program, p.positionals[0]))
        return frozenset(keys)


@dataclass(frozen=True, slots=True)
class Matcher:
    conditions: MatchConditions
    tools: frozenset[str] | None
    pattern: CommandPattern | None
    glob: re.Pattern[str] | None
    path_globs: tuple[re.Pattern[str], ...] | None
    subject_globs: tuple[re.Pattern[str], ...] | None
    risk_levels: frozenset[str] | None
    risk_min: RiskLevel | None
    risk_max: RiskLevel | None
    ci: CiMatcher | None
    index_key: tuple[str, str | None] | None  # (program, first positional or None); None: any command

    @classmethod
    def compile(cls, cond: MatchConditions) -> Matcher:
        pattern = CommandPattern.parse(cond.argv_prefix) if cond.argv_prefix is not None else None
        key: tuple[str, str | None] | None = None
        if pattern is not None and pattern.program != WILDCARD:
            key = (pattern.program, pattern.positionals[0] if pattern.positionals else None)
        elif pattern is None and cond.argv_glob is not None:
            program = _glob_program(cond.argv_glob)
            key = None if program == WILDCARD else (program, None)
        return cls(
            conditions=cond,
            tools=expand_tools(cond.tool) if cond.tool is not None else None,
            pattern=pattern,
            # every glob compiled here, once (they were checked when the config was loaded)
            glob=compile_glob(cond.argv_glob) if cond.argv_glob is not None else None,
            path_globs=tuple(map(compile_glob, cond.paths)) if cond.paths is not None else None,
            subject_globs=tuple(map(compile_glob, cond.subject)) if cond.subject is not None else None,
            risk_levels=frozenset(cond.risk) if cond.risk is not None else None,
            risk_min=RiskLevel.parse(cond.risk_at_least) if cond.risk_at_least is not None else None,
            risk_max=RiskLevel.parse(cond.risk_at_most) if cond.risk_at_most is not None else None,
            ci=CiMatcher.compile(cond.ci) if cond.ci is not None else None,
            index_key=key,
        )

    @property
    def uses_risk(self) -> bool:
        return self.risk_levels is not None or self.risk_min is not None or self.risk_max is not None

    def _command_matches(self, facts: RequestFacts, i: int) -> bool:
        if self.pattern is not None and not self.pattern.matches_parsed(facts.parsed[i]):
            return False
        return self.glob is None or self.glob.match(facts.joined()[i]) is not None

    def matches(self, facts: RequestFacts, *, every_command: bool) -> bool:
        """``every_command``: all commands of a compound string must match (for grants); otherwise
        one is enough (for refusals)."""
        cond = self.conditions
        if self.tools is not None and facts.tool not in self.tools:
            return False
        if cond.profile is not None and facts.profile not in cond.profile:
            return False
        context = facts.sanitized.context
        if cond.tenant is not None and context.tenant not in cond.tenant:
            return False
        if self.subject_globs is not None and not any(g.match(context.subject) for g in self.subject_globs):
            return False
        if self.ci is not None and not self.ci.matches(context.ci):
            return False
        if self.risk_levels is not None and facts.risk.label not in self.risk_levels:
            return False
        if self.risk_min is not None and facts.risk < self.risk_min:
            return False
        if self.risk_max is not None and facts.risk > self.risk_max:
            return False
        if cond.complex is not None and facts.is_complex != cond.complex:
            return False
        if cond.opaque is not None and (facts.blind is not None) != cond.opaque:
            return False
        if self.path_globs is not None and not any(g.match(p) for p in facts.paths for g in self.path_globs):
            return False
        if self.pattern is not None or self.glob is not None:
            if not facts.commands or (every_command and facts.script_unread):
                return False
            hits = (self._command_matches(facts, i) for i in range(len(facts.commands)))
            return all(hits) if every_command else any(hits)
        return True


def request_paths(sanitized: SanitizedRequest) -> list[str]:
    script = sanitized.script.path if sanitized.script is not None else None
    paths = [p for p in (sanitized.path, script, sanitized.cwd) if p is not None]
    paths.extend(sanitized.patch_paths or ())
    return paths
