"""Fit an event into one evidence record: degrade what does not fit, never refuse it for size or text.

An end record must never be lost because a workload made some part of it huge (thousands of long file
names) or put text in it that is not UTF-8 (names with undecodable bytes). Callers bound the parts they
build; this is the writer's last line, applied to every event before it is validated:

* text that cannot be encoded as UTF-8 (lone surrogates, e.g. undecodable bytes of a file name) is
  escaped (``\\udcff``), in values and in keys;
* free-text fields longer than their limit (``reason``, ``tenant``, ...) are clipped, with the length
  and sha256 of the whole text appended;
* when the record would still be larger than :data:`~orchestrator.evidence.records.MAX_RECORD_BYTES`,
  the largest parts of ``data`` are replaced, largest first and as deep as that suffices, by a stand-in
  ``{"evidence_omitted": <why>, "bytes": <encoded size>, "sha256": <of its canonical JSON>}`` (plus
  ``"items"`` for a list).

Whatever was changed is listed in ``data.evidence_degraded`` (``where: what``), so a degraded record says
so itself and verifies like any other. Pure functions: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from orchestrator.domain.canonical import canonical_json, sha256_hex
from orchestrator.evidence.records import EvidenceEvent

DEGRADED_KEY: Final = "evidence_degraded"
"""``data`` key listing what was changed to fit (``"<where>: <what>"``)."""
OMITTED_KEY: Final = "evidence_omitted"
"""Key of a stand-in that replaced a part too large for the record."""
OMITTED_WHY: Final = "too large for one evidence record"
MAX_NOTES: Final = 16
_NOTE_CHARS: Final = 200
_NOTES_ROOM: Final = (MAX_NOTES + 1) * (_NOTE_CHARS * 4 + 3) + 64  # the listing, encoded, at worst


def _max_lengths() -> dict[str, int]:
    """Free-text fields of an event and their limits, from its JSON Schema (a pattern is not free text)."""
    limits: dict[str, int] = {}
    for name, prop in EvidenceEvent.model_json_schema()["properties"].items():
        for option in prop.get("anyOf", [prop]):
            if option.get("type") == "string" and "maxLength" in option and "pattern" not in option:
                limits[name] = option["maxLength"]
    return limits


TEXT_LIMITS: Final[Mapping[str, int]] = _max_lengths()


class _Notes:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.dropped = 0

    def add(self, where: str, what: str) -> None:
        if len(self.items) < MAX_NOTES:
            where = where if len(where) <= _NOTE_CHARS // 2 else where[: _NOTE_CHARS // 2 - 1] + "…"
            self.items.append(f"{where}: {what}"[:_NOTE_CHARS])
        else:
            self.dropped += 1

    def listing(self) -> list[str]:
        return self.items + ([f"... and {self.dropped} more"] if self.dropped else [])


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escape(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _clean(value: Any, where: str, notes: _Notes) -> Any:
    """``value`` with every string (keys too) encodable as UTF-8."""
    if isinstance(value, str):
        if _encodable(value):
            return value
        notes.add(where, "text that is not UTF-8 escaped")
        return _escape(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = key
            if isinstance(key, str) and not _encodable(key):
                name = _escape(key)
                notes.add(f"{where}.{name}", "key that is not UTF-8 escaped")
                while name in value or name in out:  # an escaped key never takes another's place
                    name += "~"
            out[name] = _clean(item, f"{where}.{name}", notes)
        return out
    if isinstance(value, list | tuple):
        return [_clean(item, f"{where}[{index}]", notes) for index, item in enumerate(value)]
    return value


def _clip(text: str, limit: int) -> str:
    digest = sha256_hex(text.encode("utf-8"))
    tail = f"… [clipped: {len(text)} chars, sha256 {digest[:16]}]"
    return (text[: max(0, limit - len(tail))] + tail)[:limit]


def _size(value: Any) -> int:
    return len(canonical_json(value))


def _stand_in(value: Any, size: int) -> dict[str, Any]:
    stand_in: dict[str, Any] = {OMITTED_KEY: OMITTED_WHY, "bytes": size, "sha256": sha256_hex(canonical_json(value))}
    if isinstance(value, list):
        stand_in["items"] = len(value)
    return stand_in


def _shrink(value: Any, limit: int, where: str, notes: _Notes) -> Any:
    """``value`` encoded in at most ``limit`` bytes if it can be: the largest members of a mapping are
    shrunk first (so small facts, counts and codes, stay); anything else that does not fit, and a mapping
    whose members cannot be made to fit, becomes a stand-in."""
    size = _size(value)
    if size <= limit:
        return value
    if isinstance(value, dict) and value:
        out = dict(value)
        sizes = {key: _size(item) for key, item in out.items()}
        total = size
        for key in sorted(out, key=lambda k: (-sizes[k], k)):
            if total <= limit:
                break
            room = max(0, limit - (total - sizes[key]))
            item = _shrink(out[key], room, f"{where}.{key}", notes)
            new_size = _size(item)
            total += new_size - sizes[key]
            out[key], sizes[key] = item, new_size
        if total <= limit:
            return out
    notes.add(where, f"replaced by its size and sha256 ({size} bytes encoded)")
    return _stand_in(value, size)


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, Mapping):
        return any(_has_nan(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nan(item) for item in value)
    return False


def fit_fields(fields: Mapping[str, Any], budget: int) -> dict[str, Any]:
    """The event ``fields`` (fields that do not apply left out) made to fit ``budget`` encoded bytes.

    Only what cannot be encoded or does not fit is changed, and the change is listed in
    ``data.evidence_degraded``. Fields of the wrong type or shape are left for validation to refuse.
    """
    notes = _Notes()
    out = {name: _clean(value, name, notes) for name, value in fields.items() if value is not None}
    for name, limit in TEXT_LIMITS.items():
        text = out.get(name)
        if isinstance(text, str) and len(text) > limit:
            notes.add(name, f"clipped to {limit} chars")
            out[name] = _clip(text, limit)
    data = out.get("data")
    if (data is not None and not isinstance(data, dict)) or _has_nan(data):
        return out  # validation refuses it, with the field named
    try:
        size = _size(out)
    except (TypeError, ValueError):  # not JSON: validation refuses it
        return out
    if size > budget and data:
        rest = size - _size(data)
        data = _shrink(data, max(0, budget - rest - _NOTES_ROOM), "data", notes)
    if notes.items:
        out["data"] = {**(data or {}), DEGRADED_KEY: notes.listing()}
        if _size(out) > budget and data:  # cannot happen with the bounds above; never refuse all the same
            out["data"] = {"data": _stand_in(data, _size(data)), DEGRADED_KEY: notes.listing()}
    return out
