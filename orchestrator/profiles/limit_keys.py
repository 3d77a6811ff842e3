"""The profile ``limits:`` keys that usage speaks to: where each one's value sits in ``RunLimits``, how a
user's text becomes a value (the profile schema's own rules: ``Limits``), and how a value is written back
in a profile file's own form (``memory: 512m``, ``cpus: 0.5``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import ValidationError

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.usage import RunLimits
from orchestrator.profiles.models import GIB, KIB, MIB, TIB, Limits
from orchestrator.profiles.usage_stats import Number

#: profile ``limits:`` key → the ``RunLimits`` field holding it (only memory is named differently there)
RUN_LIMITS_FIELD: Final[Mapping[str, str]] = {
    "memory": "memory_bytes",
    "cpus": "cpus",
    "pids": "pids",
    "wall_timeout_s": "wall_timeout_s",
    "stdout_max_bytes": "stdout_max_bytes",
    "stderr_max_bytes": "stderr_max_bytes",
    "workspace_write_bytes": "workspace_write_bytes",
    "workspace_write_files": "workspace_write_files",
}
USAGE_KEYS: Final = tuple(RUN_LIMITS_FIELD)

# the keys whose values are sizes in bytes: written as a profile file writes them ("512m", "8g")
_SIZE_KEYS: Final = frozenset({"memory", "stdout_max_bytes", "stderr_max_bytes", "workspace_write_bytes"})
_SIZE_SUFFIXES: Final = (("t", TIB), ("g", GIB), ("m", MIB), ("k", KIB))


def limit_of(limits: RunLimits, key: str) -> Number:
    """The value of the profile key ``key`` in ``limits``."""
    value: Number = getattr(limits, RUN_LIMITS_FIELD[key])
    return value


def parse_limits(proposed: Mapping[str, str | float | int]) -> dict[str, Number]:
    """``proposed`` (``limits:`` keys, values as typed: ``{"memory": "512m", "cpus": "1"}``) validated by the
    profile schema, key by key; ``INPUT.INVALID`` naming each bad key (never its value) otherwise."""
    unknown = sorted(key for key in proposed if key not in RUN_LIMITS_FIELD)
    if unknown:
        raise InputInvalid(
            f"{', '.join(f'limits.{key}' for key in unknown)}: not a limit the recorded usage can replay "
            f"(one of: {', '.join(USAGE_KEYS)})",
            details={"fields": [f"limits.{key}" for key in unknown]},
        )
    try:
        # only the given keys are set, so every other field's default validates and only theirs can fail
        validated = Limits.model_validate(dict(proposed))
    except ValidationError as err:
        problems = err.errors(include_input=False, include_url=False)
        fields = [f"limits.{'.'.join(str(part) for part in e['loc'])}" for e in problems]
        message = "; ".join(f"{field}: {e['msg']}" for field, e in zip(fields, problems, strict=True))
        raise InputInvalid(message, details={"fields": fields}) from None
    parsed: dict[str, Number] = {key: getattr(validated, key) for key in proposed}
    return parsed


def profile_value(key: str, value: Number) -> str | int | float:
    """``value`` of ``key`` as a profile file writes it: sizes with the largest exact suffix (``512m``,
    ``2g``; ``parse_size`` reads them back to the same bytes), whole numbers as integers (``cpus: 2``)."""
    if key in _SIZE_KEYS:
        size = int(value)
        for suffix, factor in _SIZE_SUFFIXES:
            if size >= factor and size % factor == 0:
                return f"{size // factor}{suffix}"
        return size
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
