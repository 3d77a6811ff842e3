"""Seccomp profiles (OCI JSON): load by name, validate, and answer "is this syscall allowed?".

Only the portable subset is accepted, the one runc (Docker, containerd) and gVisor's ``--oci-seccomp``
all apply the same way:

* no ``includes``/``excludes``/``archMap`` keys anywhere: containerd reads the profile into the OCI
  struct and silently drops them (which would allow the CAP_SYS_ADMIN-gated calls to everyone);
* actions ALLOW, ERRNO, KILL, TRAP, TRACE only (gVisor refuses the others), and never a default
  action that allows;
* at most one condition per argument index in a rule: runc and gVisor turn two conditions on the same
  argument into an OR ("domain != 40 AND domain != 38" would allow every domain);
* a syscall allowed unconditionally appears in no other rule;
* no argument filter on a socket or SysV IPC call together with an architecture where libseccomp
  multiplexes those calls (x86, s390, ppc): it rewrites such a rule into socketcall/ipc *without*
  the argument conditions, so the filter would be void for that architecture.

The text handed to the engine is the canonical compact JSON of the validated document, and its sha256
is what a resolved profile records.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.domain.canonical import canonical_json, sha256_hex
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.profiles.paths import SECCOMP_SUBDIR, default_search_path, find_in
from orchestrator.yamlfile import DEFAULT_LIMITS, parse_yaml, read_text

EPERM = 1
ENOSYS = 38
_SYSCALL_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")

Action = Literal["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_TRAP", "SCMP_ACT_TRACE"]
Op = Literal[
    "SCMP_CMP_EQ", "SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_GT", "SCMP_CMP_GE", "SCMP_CMP_MASKED_EQ"
]
# fmt: off
Arch = Literal[
    "SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM",
    "SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64", "SCMP_ARCH_MIPS64N32", "SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64",
    "SCMP_ARCH_MIPSEL64N32", "SCMP_ARCH_PPC", "SCMP_ARCH_PPC64", "SCMP_ARCH_PPC64LE", "SCMP_ARCH_S390",
    "SCMP_ARCH_S390X", "SCMP_ARCH_RISCV64",
]
# fmt: on
_SEVERITY = {"SCMP_ACT_ALLOW": 0, "SCMP_ACT_TRACE": 1, "SCMP_ACT_ERRNO": 2, "SCMP_ACT_TRAP": 3, "SCMP_ACT_KILL": 4}
_CONDITIONAL_KEYS = ("includes", "excludes", "archMap")
_U64 = 2**64 - 1
# Where libseccomp multiplexes socket and SysV IPC calls through socketcall(2)/ipc(2), dropping the
# argument conditions of rules on them.
_MUXED_ARCHES = frozenset(
    {"SCMP_ARCH_X86", "SCMP_ARCH_S390", "SCMP_ARCH_S390X", "SCMP_ARCH_PPC", "SCMP_ARCH_PPC64", "SCMP_ARCH_PPC64LE"}
)
# fmt: off
_MUXED_CALLS = frozenset(
    {
        "socket", "socketpair", "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
        "send", "recv", "sendto", "recvfrom", "shutdown", "setsockopt", "getsockopt", "sendmsg", "recvmsg",
        "recvmmsg", "sendmmsg", "semop", "semget", "semctl", "semtimedop", "msgsnd", "msgrcv", "msgget",
        "msgctl", "shmat", "shmdt", "shmget", "shmctl",
    }
)
# fmt: on


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class SeccompArg(_Strict):
    """One argument condition (OCI ``LinuxSeccompArg``)."""

    index: int = Field(ge=0, le=5, description="Argument index, 0-5.")
    value: int = Field(ge=0, le=_U64, description="Operand (for MASKED_EQ: the mask).")
    valueTwo: int = Field(default=0, ge=0, le=_U64, description="Second operand (for MASKED_EQ: the value).")
    op: Op = Field(description="Comparison.")


class SeccompRule(_Strict):
    """One rule (OCI ``LinuxSyscall``): these syscalls get ``action`` when all ``args`` hold."""

    names: tuple[str, ...] = Field(min_length=1, description="Syscall names.")
    action: Action = Field(description="What the call gets.")
    errnoRet: int | None = Field(default=None, ge=1, le=4095, description="errno for SCMP_ACT_ERRNO/TRACE.")
    args: tuple[SeccompArg, ...] = Field(default=(), max_length=6, description="Conditions, all must hold.")

    @field_validator("names")
    @classmethod
    def _names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in names if not _SYSCALL_NAME.match(n)]
        if bad:
            raise ValueError(f"not syscall names: {', '.join(repr(b)[:70] for b in bad[:5])}")
        if len(set(names)) != len(names):
            raise ValueError("a syscall is listed twice")
        return names

    @field_validator("args")
    @classmethod
    def _one_condition_per_index(cls, args: tuple[SeccompArg, ...]) -> tuple[SeccompArg, ...]:
        seen: set[int] = set()
        for arg in args:
            if arg.index in seen:
                raise ValueError(
                    f"two conditions on argument {arg.index}: runc and gVisor OR them instead of AND; "
                    "write one rule per allowed value instead"
                )
            seen.add(arg.index)
        return args

    @model_validator(mode="after")
    def _errno_only_for_errno(self) -> SeccompRule:
        if self.errnoRet is not None and self.action not in ("SCMP_ACT_ERRNO", "SCMP_ACT_TRACE"):
            raise ValueError("errnoRet is only meaningful with SCMP_ACT_ERRNO or SCMP_ACT_TRACE")
        return self


class SeccompDocument(_Strict):
    """A seccomp profile in OCI form, restricted to what every supported runtime applies the same way."""

    defaultAction: Action = Field(description="Action for every syscall no rule matches (never ALLOW).")
    defaultErrnoRet: int | None = Field(default=None, ge=1, le=4095, description="errno of the default action.")
    architectures: tuple[Arch, ...] = Field(min_length=1, description="Architectures the filter covers.")
    flags: tuple[Literal["SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_LOG"], ...] = Field(
        default=(), description="seccomp(2) flags."
    )
    syscalls: tuple[SeccompRule, ...] = Field(min_length=1, description="Rules.")

    @field_validator("defaultAction")
    @classmethod
    def _not_allow(cls, action: str) -> str:
        if action == "SCMP_ACT_ALLOW":
            raise ValueError("must not be SCMP_ACT_ALLOW: a sandbox seccomp profile is an allowlist")
        return action

    @model_validator(mode="after")
    def _no_void_filters(self) -> SeccompDocument:
        muxed = sorted(_MUXED_ARCHES.intersection(self.architectures))
        if muxed:
            for i, rule in enumerate(self.syscalls):
                filtered = sorted(_MUXED_CALLS.intersection(rule.names)) if rule.args else []
                if filtered:
                    raise ValueError(
                        f"architectures: {', '.join(muxed)} with argument filters on {', '.join(filtered)} "
                        f"(syscalls[{i}]): libseccomp rewrites those into socketcall/ipc without the "
                        "conditions, so the filter would not apply there; leave these architectures out"
                    )
        return self

    @model_validator(mode="after")
    def _unconditional_alone(self) -> SeccompDocument:
        where: dict[str, list[int]] = {}
        for i, rule in enumerate(self.syscalls):
            for name in rule.names:
                where.setdefault(name, []).append(i)
        for i, rule in enumerate(self.syscalls):
            if rule.args:
                continue
            for name in rule.names:
                if len(where[name]) > 1:
                    others = ", ".join(f"syscalls[{j}]" for j in where[name] if j != i)
                    raise ValueError(
                        f"syscalls[{i}] applies to {name} unconditionally, yet {others} also name it "
                        "(runtimes merge such rules unpredictably)"
                    )
        return self


@dataclass(frozen=True)
class SeccompProfile:
    """A loaded, validated seccomp profile."""

    name: str
    source: str
    document: SeccompDocument = field(repr=False)
    json_text: str = field(repr=False)
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.json_text)
        return result


# -- parsing and validation --------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _find_conditional(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    if isinstance(value, dict):
        for key, child in value.items():
            if key in _CONDITIONAL_KEYS:
                return (*path, key)
            found = _find_conditional(child, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found = _find_conditional(child, (*path, i))
            if found is not None:
                return found
    return None


def _line_for(text: str, source: str, loc: tuple[str | int, ...]) -> int | None:
    """Best effort: the line of a JSON path, by reading the JSON as YAML (a superset) with line marks."""
    try:
        _, located = parse_yaml(text, source)
    except ConfigInvalid:
        return None
    return located.line_for(loc)


def _where(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line else source


# brackets outside strings (the text parsed as JSON up to the point of interest: its strings are closed)
_JSON_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{}]')


def _too_deep_line(text: str, limit: int) -> int | None:
    """The line of the first bracket nested deeper than ``limit``."""
    depth = 0
    for match in _JSON_BRACKETS.finditer(text):
        bracket = match.group()
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, match.start()) + 1
        elif bracket in "]}":
            depth -= 1
    return None


def _too_deep(data: Any, limit: int) -> tuple[str | int, ...] | None:
    """Where ``data`` nests mappings or lists deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if isinstance(value, (dict, list)):
            if len(loc) >= limit:
                return loc
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((child, (*loc, key)) for key, child in items)
    return None


def _parse_json(text: str, source: str) -> Any:
    limit = DEFAULT_LIMITS.max_depth
    too_deep = f"nested deeper than {limit} levels"
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except _DuplicateKey as dup:
        raise ConfigInvalid(f"{source}: duplicate key {dup.args[0]!r}", details={"file": source}) from None
    except json.JSONDecodeError as err:
        raise ConfigInvalid(
            f"{source}:{err.lineno}: invalid JSON: {err.msg}", details={"file": source, "line": err.lineno}
        ) from None
    except RecursionError:  # json's decoder stops itself well before the stack would
        line = _too_deep_line(text, limit)
        raise ConfigInvalid(f"{_where(source, line)}: {too_deep}", details={"file": source, "line": line}) from None
    except ValueError as err:
        raise ConfigInvalid(f"{source}: invalid JSON: {err}", details={"file": source}) from None
    loc = _too_deep(data, limit)
    if loc is not None:
        line = _too_deep_line(text, limit)
        field_name = ".".join(str(p) for p in loc)
        raise ConfigInvalid(
            f"{_where(source, line)}: {field_name}: {too_deep}",
            details={"file": source, "line": line, "field": field_name},
        )
    return data


def parse_seccomp(text: str, source: str = "<seccomp>") -> SeccompDocument:
    """Parse and validate seccomp JSON text; CONFIG.INVALID names the file, line and JSON field."""
    return validate_seccomp(_parse_json(text, source), source, text=text)


def validate_seccomp(data: Any, source: str = "<seccomp>", *, text: str | None = None) -> SeccompDocument:
    """Validate a parsed seccomp profile (see the module docstring for what is refused)."""
    if not isinstance(data, dict):
        raise ConfigInvalid(f"{source}: a seccomp profile must be a JSON object", details={"file": source})
    conditional = _find_conditional(data)
    if conditional is not None:
        field_name = ".".join(str(p) for p in conditional)
        line = _line_for(text, source, conditional) if text else None
        raise ConfigInvalid(
            f"{_where(source, line)}: {field_name}: conditional keys (includes/excludes/archMap) are not "
            "allowed: containerd drops them, so the profile must be resolved for no capabilities "
            "(and use 'architectures')",
            details={"file": source, "line": line, "field": field_name},
        )
    try:
        return SeccompDocument.model_validate(data)
    except ValidationError as err:
        problems = []
        fields = []
        first_line: int | None = None
        for item in err.errors(include_input=False, include_url=False):
            loc = tuple(item["loc"])
            field_name = ".".join(str(p) for p in loc) or "(root)"
            line = _line_for(text, source, loc) if text else None
            first_line = first_line or line
            fields.append(field_name)
            problems.append(f"{_where(source, line)}: {field_name}: {item['msg']}")
        raise ConfigInvalid(
            "; ".join(problems), details={"file": source, "line": first_line, "fields": fields}
        ) from None


# -- loading by name ------------------------------------------------------------------------------------

_CACHE: dict[tuple[str, int, int], SeccompProfile] = {}


def load_seccomp_file(path: str | os.PathLike[str], name: str | None = None) -> SeccompProfile:
    """Load and validate one seccomp JSON file."""
    file = Path(path)
    source = str(file)
    try:
        stat = file.stat()
        key = (str(file.resolve()), stat.st_mtime_ns, stat.st_size)
        if key in _CACHE and (name is None or _CACHE[key].name == name):
            return _CACHE[key]
    except FileNotFoundError:
        raise ConfigInvalid(f"{source}: file not found", details={"file": source}) from None
    except OSError as err:
        raise ConfigInvalid(f"{source}: cannot read: {err.__class__.__name__}", details={"file": source}) from None
    text = read_text(file)  # at most DEFAULT_LIMITS.max_bytes, UTF-8: CONFIG.INVALID naming the line
    data = _parse_json(text, source)
    document = validate_seccomp(data, source, text=text)
    canonical = canonical_json(data)  # exactly what the author wrote, without the whitespace
    json_text = canonical.decode("utf-8")
    profile = SeccompProfile(
        name=name or file.stem, source=source, document=document, json_text=json_text, sha256=sha256_hex(canonical)
    )
    _CACHE[key] = profile
    return profile


def seccomp_names(search_path: Sequence[Path] | None = None) -> list[str]:
    """Every seccomp profile name on the search path."""
    dirs = default_search_path() if search_path is None else search_path
    names = set()
    for directory in dirs:
        for path in (directory / SECCOMP_SUBDIR).glob("*.json"):
            if path.is_file() and _NAME.match(path.stem):
                names.add(path.stem)
    return sorted(names)


def load_seccomp(name: str, *, search_path: Sequence[Path] | None = None) -> SeccompProfile:
    """The seccomp profile ``name`` from ``<dir>/seccomp/<name>.json`` on the search path (later wins).

    ``search_path`` defaults to the built-in directory plus ``$SANDBOX_PROFILES_PATH``.
    CONFIG.INVALID when it does not exist or is not valid.
    """
    dirs = default_search_path() if search_path is None else tuple(search_path)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigInvalid(f"seccomp: {name!r:.80} is not a seccomp profile name", details={"field": "seccomp"})
    path = find_in(dirs, f"{SECCOMP_SUBDIR}/{name}.json")
    if path is None:
        known = ", ".join(seccomp_names(dirs)) or "none"
        raise ConfigInvalid(
            f"seccomp: no seccomp profile {name!r} (known: {known})", details={"field": "seccomp", "name": name}
        )
    return load_seccomp_file(path, name)


# -- questions about a profile ----------------------------------------------------------------------------


def _document(profile: SeccompProfile | SeccompDocument | Mapping[str, Any] | str) -> SeccompDocument:
    if isinstance(profile, SeccompProfile):
        return profile.document
    if isinstance(profile, SeccompDocument):
        return profile
    if isinstance(profile, str):
        return parse_seccomp(profile)
    return validate_seccomp(dict(profile))


def _holds(arg: SeccompArg, args: Sequence[int]) -> bool:
    actual = (args[arg.index] if arg.index < len(args) else 0) & _U64
    op = arg.op
    if op == "SCMP_CMP_EQ":
        return actual == arg.value
    if op == "SCMP_CMP_NE":
        return actual != arg.value
    if op == "SCMP_CMP_LT":
        return actual < arg.value
    if op == "SCMP_CMP_LE":
        return actual <= arg.value
    if op == "SCMP_CMP_GT":
        return actual > arg.value
    if op == "SCMP_CMP_GE":
        return actual >= arg.value
    return (actual & arg.value) == arg.valueTwo  # SCMP_CMP_MASKED_EQ: value is the mask


def syscall_action(
    profile: SeccompProfile | SeccompDocument | Mapping[str, Any] | str, name: str, args: Sequence[int] = ()
) -> tuple[str, int | None]:
    """What a call of ``name`` with these raw argument values gets: ``(action, errno or None)``.

    Models libseccomp/runc semantics on the native architecture: the conditions of a rule must all
    hold; when several rules match, the most restrictive action wins; no match: the default action.
    Missing argument values count as 0.
    """
    doc = _document(profile)
    matched: list[tuple[str, int | None]] = []
    for rule in doc.syscalls:
        if name in rule.names and all(_holds(a, args) for a in rule.args):
            matched.append((rule.action, rule.errnoRet))
    if matched:
        action, errno = max(matched, key=lambda m: _SEVERITY[m[0]])
    else:
        action, errno = doc.defaultAction, doc.defaultErrnoRet
    if action in ("SCMP_ACT_ERRNO", "SCMP_ACT_TRACE"):
        return action, errno if errno is not None else EPERM
    return action, None


def unconditionally_allowed(profile: SeccompProfile | SeccompDocument | Mapping[str, Any] | str) -> set[str]:
    """Syscall names an ALLOW rule without argument conditions covers."""
    doc = _document(profile)
    return {n for rule in doc.syscalls if rule.action == "SCMP_ACT_ALLOW" and not rule.args for n in rule.names}


def blocked_syscalls(
    profile: SeccompProfile | SeccompDocument | Mapping[str, Any] | str, names: Iterable[str]
) -> list[str]:
    """Those of ``names`` the profile does not allow unconditionally, in the given order.

    Such a call gets the default action (or an explicit non-allow rule) unless an argument filter
    explicitly allows it for the values it was called with (e.g. ``socket`` for AF_UNIX only). Use
    :func:`syscall_action` to ask about particular argument values.
    """
    allowed = unconditionally_allowed(profile)
    return [n for n in names if n not in allowed]
