"""Path arguments that matter to risk checks: devices, system directories, critical trees."""

from __future__ import annotations

import posixpath

from orchestrator.gate.paths import SYSTEM_PREFIXES

__all__ = ["critical_target", "device", "normal_target", "system_path"]

_BENIGN_DEVICES = frozenset(
    {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero", "/dev/full"}
)
_HOME_TARGETS = frozenset({"~", "$HOME", "${HOME}"})
_CRITICAL_DIRS = frozenset(
    {
        "/",
        *SYSTEM_PREFIXES,
        "/var",
        "/home",
        "/root",
        "/opt",
        "/srv",
        "/mnt",
        "/media",
        "/run",
        "/snap",
    }
)


def normal_target(word: str) -> str:
    """A path argument normalised for comparisons: quotes dropped, '/./', '//', trailing '/' and
    '/*' folded (``/*`` → ``/``, ``"$HOME"/`` → ``$HOME``)."""
    text = word.replace('"', "").replace("'", "")
    while text.endswith(("/*", "/.")) and len(text) > 2:
        text = text[:-2]
    if text in ("/*", "/."):
        return "/"
    if text.startswith("/"):
        return posixpath.normpath(text).replace("//", "/")
    return text.rstrip("/") or text


def critical_target(word: str) -> bool:
    target = normal_target(word)
    return target in _CRITICAL_DIRS or target in _HOME_TARGETS


def device(target: str) -> bool:
    return target.startswith("/dev/") and target not in _BENIGN_DEVICES and not target.startswith("/dev/fd/")


def system_path(target: str) -> str | None:
    if not target.startswith("/"):
        return None
    normal = posixpath.normpath(target)
    for prefix in SYSTEM_PREFIXES:
        if normal == prefix or normal.startswith(prefix + "/"):
            return prefix
    return None
