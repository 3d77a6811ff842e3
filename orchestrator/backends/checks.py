"""What ``sandboxctl doctor`` reports: one check, its stable code, and a backend's own fixes.

A failed check names its true cause and the fix for it; a check that could not be made because an earlier
one failed says so (``not_checked``) rather than guess a cause. Both count as failures (fail closed: the
doctor passes only on what it saw). Codes are public like the error codes (docs/errors.md, one table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: why a check failed (``sandboxctl doctor --json``: ``code``); never renamed, only added to
CheckCode = Literal[
    "DOCTOR.ENGINE",
    "DOCTOR.NAMESPACE",
    "DOCTOR.POD_SECURITY",
    "DOCTOR.NETWORK_POLICY",
    "DOCTOR.RUNTIME",
    "DOCTOR.PERMISSIONS",
    "DOCTOR.SECCOMP",
    "DOCTOR.IMAGE",
    "DOCTOR.PROFILE",
    "DOCTOR.EVIDENCE",
    "DOCTOR.LIMITS",
    "DOCTOR.POOL",
    "DOCTOR.NOT_CHECKED",
]


@dataclass(frozen=True, slots=True)
class PreflightCheck:
    """One thing ``sandboxctl doctor`` checked about where sandboxes run, and the fix if it failed."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None  # what to do, one command a line
    code: CheckCode | None = None  # set when it failed
    checked: bool = True  # False: not made (an earlier check failed; ``detail`` says which)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "ok": self.ok,
            "checked": self.checked,
            "code": self.code,
            "detail": self.detail,
            "fix": self.fix,
        }


#: why a backend's own checks were not made when its engine does not answer: the doctor's ``engine`` check (the
#: same call) says why, once, with its fix
ENGINE_FAILED = "engine failed (above)"


def failed(name: str, code: CheckCode, detail: str, fix: str | None) -> PreflightCheck:
    return PreflightCheck(name, False, detail, fix, code)


def not_checked(name: str, because: str) -> PreflightCheck:
    """A check that depends on one that failed: named, never passed (fail closed), never given a guessed fix."""
    return PreflightCheck(name, False, f"not checked: {because}", None, "DOCTOR.NOT_CHECKED", checked=False)


@dataclass(frozen=True, slots=True)
class DoctorFixes:
    """What fixes each lack the doctor finds outside a backend's own checks, for this kind of backend: the
    doctor's generic checks (engine, runtimes, images, probes) must not give Docker's fix for a cluster."""

    engine: str  # the engine does not answer
    runtime: str  # a profile's runtime is not there
    image: str  # a profile's image is missing
    limits: str  # a probe sandbox did not run, or saw weaker limits than its profile's
