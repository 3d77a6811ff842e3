"""Short constructors for the program table, so that an entry reads like a man page's synopsis."""

from __future__ import annotations

from orchestrator.domain.sanitized import RiskLevel
from orchestrator.gate.programs.model import Opt, Runs, Takes

MEDIUM, HIGH, CRITICAL = RiskLevel.MEDIUM, RiskLevel.HIGH, RiskLevel.CRITICAL
RUNS = "runs a program"
WRITES = "writes a file"


def flag(*spellings: str, means: tuple[str, ...] = (), risk: tuple[RiskLevel, str] | None = None) -> Opt:
    """An option without a value."""
    return Opt(spellings, Takes.NONE, means=means, risk=risk)


def value(
    *spellings: str,
    runs: Runs | None = None,
    risk: tuple[RiskLevel, str] | None = None,
    ends: bool = False,
    placeholder: bool = False,
) -> Opt:
    """An option with a required value (attached or the next word)."""
    return Opt(spellings, Takes.VALUE, runs=runs, risk=risk, ends=ends, placeholder=placeholder)


def attached(
    *spellings: str, runs: Runs | None = None, risk: tuple[RiskLevel, str] | None = None, placeholder: bool = False
) -> Opt:
    """An option with an optional value, attached only (``-i[R]``, ``--opt[=V]``)."""
    return Opt(spellings, Takes.ATTACHED, runs=runs, risk=risk, placeholder=placeholder)


def short_flag_long_optional(
    short: str, long: str, value_means: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> tuple[Opt, Opt]:
    """``-i`` without a value, ``--interactive[=WHEN]`` with an optional one: one meaning."""
    return Opt((short,), Takes.NONE, means=(long,)), Opt((long,), Takes.ATTACHED, value_means=value_means)


def stop(*spellings: str, takes: Takes = Takes.NONE) -> Opt:
    """An option with which the program runs no command (``-p PID`` acts on another process)."""
    return Opt(spellings, takes, stop=True)


def info(*spellings: str) -> Opt:
    """An option that only prints information (and so runs nothing)."""
    return Opt(spellings, info=True, stop=True)


def help_version(help_short: str = "-h", version_short: str = "-V") -> tuple[Opt, ...]:
    """``--help``/``--version`` with their usual short spellings (util-linux: ``-h``, ``-V``)."""
    return (
        info(*((help_short,) if help_short else ()), "--help"),
        info(*((version_short,) if version_short else ()), "--version"),
    )


def names(text: str) -> tuple[str, ...]:
    """Whitespace-separated names."""
    return tuple(text.split())
