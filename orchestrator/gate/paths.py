"""Path analysis: credential files, and paths that leave the workspace (also through symlinks).

Credential matching works on path components, case-insensitively, and also inside words that keep
an expansion as source text (``"$HOME/.ssh/id_rsa"``): quotes, ``=`` and ``:`` count as component
boundaries, so option values (``--key=~/.ssh/k``) and ``user:path`` forms are seen too.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from orchestrator.domain.sanitized import RiskLevel

if TYPE_CHECKING:
    from orchestrator.gate.risk import Finding

__all__ = ["SYSTEM_PREFIXES", "assess_paths", "credential_reason", "escapes_workspace"]

_SPLIT = re.compile(r"[/\"'=:]")

# Whole components (lower-cased) → label.
_NAMES: dict[str, str] = {
    ".ssh": ".ssh",
    ".gnupg": ".gnupg",
    ".aws": ".aws",
    ".azure": ".azure",
    ".password-store": ".password-store",
    ".envrc": ".envrc",
    ".netrc": ".netrc",
    "_netrc": ".netrc",
    ".npmrc": ".npmrc",
    ".pypirc": ".pypirc",
    ".git-credentials": ".git-credentials",
    ".pgpass": ".pgpass",
    ".my.cnf": ".my.cnf",
    ".vault-token": ".vault-token",
    ".htpasswd": ".htpasswd",
    ".dockercfg": ".docker/config.json",
    "kubeconfig": "kubeconfig",
    "credentials": "credentials",
}
_ENV_EXAMPLES = frozenset({"example", "sample", "template", "dist", "defaults"})
_KEY_EXTENSIONS = frozenset({"pem", "key", "p12", "pfx", "jks", "keystore", "kdbx", "ppk"})
_DATA_EXTENSIONS = frozenset({"json", "yml", "yaml", "toml", "xml", "ini", "csv", "env"})
_ETC_SECRETS = {
    "shadow": "/etc/shadow",
    "shadow-": "/etc/shadow",
    "gshadow": "/etc/gshadow",
    "gshadow-": "/etc/gshadow",
    "master.passwd": "/etc/master.passwd",
    "sudoers": "/etc/sudoers",
    "sudoers.d": "/etc/sudoers",
}
_MAYBE = re.compile(r"\.|id_|etc|proc|run|kubeconfig|credentials|_netrc", re.IGNORECASE)
"""Every label needs one of these: a cheap first test."""
_ID_KEY = re.compile(r"id_[a-z0-9_]+")
_HOST_KEY = re.compile(r"ssh_host_[^/]*_key")


def _component_label(parts: list[str], i: int) -> str | None:
    comp = parts[i]
    label = _NAMES.get(comp)
    if label is not None:
        return label
    head = comp[:1]
    if head == ".":
        if comp.startswith(".env"):
            if comp == ".env":
                return ".env"
            if comp[4] == "." and comp[5:] not in _ENV_EXAMPLES:
                return ".env"
        nxt = parts[i + 1] if i + 1 < len(parts) else ""
        if comp == ".kube" and nxt == "config":
            return ".kube/config"
        if comp == ".config" and nxt == "gcloud":
            return "gcloud"
        if comp == ".docker" and nxt == "config.json":
            return ".docker/config.json"
    elif head == "i":
        if comp.startswith("id_") and _ID_KEY.fullmatch(comp):
            return "id_*"
    elif comp in ("etc", "proc", "run"):
        nxt = parts[i + 1] if i + 1 < len(parts) else ""
        if comp == "etc":
            if nxt in _ETC_SECRETS:
                return _ETC_SECRETS[nxt]
            third = parts[i + 2] if i + 2 < len(parts) else ""
            if nxt == "security" and third == "opasswd":
                return "/etc/security/opasswd"
            if nxt == "ssh" and _HOST_KEY.fullmatch(third):
                return "ssh host key"
        elif comp == "proc":
            if i + 2 < len(parts) and parts[i + 2] == "environ":
                return "process environ"
        elif nxt == "secrets":
            return "run/secrets"
    name, dot, ext = comp.rpartition(".")
    if dot and name:
        if ext in _KEY_EXTENSIONS:
            return f"*.{ext}"
        if ext in _DATA_EXTENSIONS and name in ("credentials", "secrets", "secret", "kubeconfig"):
            return comp
    return None


SYSTEM_PREFIXES: tuple[str, ...] = (
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
)
"""Leaving the workspace into these is critical."""


def credential_reason(path: str) -> str | None:
    """``"credential path (.ssh)"`` when ``path`` names a credential file or directory, else None."""
    if _MAYBE.search(path) is None:
        return None
    parts = _SPLIT.split(path.lower())
    for i in range(len(parts)):
        if parts[i]:
            label = _component_label(parts, i)
            if label is not None:
                return f"credential path ({label})"
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


def _system(path: str) -> bool:
    return path == "/" or any(_inside(path, prefix) for prefix in SYSTEM_PREFIXES)


def _target(path: str, workspace: str | os.PathLike[str] | None, cwd: str | None) -> tuple[str, str | None]:
    """(lexical target, workspace root) — the root is None when there is no workspace."""
    if workspace is None:
        return posixpath.normpath(posixpath.join(cwd or "", path)) if (cwd or path) else ".", None
    root = posixpath.normpath(posixpath.abspath(os.fspath(workspace)))
    base = posixpath.normpath(posixpath.join(root, cwd)) if cwd else root
    return posixpath.normpath(posixpath.join(base, path)), root


def escapes_workspace(path: str, *, workspace: str | os.PathLike[str] | None, cwd: str | None = None) -> str | None:
    """A reason like ``"leaves the workspace (../x)"`` when ``path`` (relative to ``cwd``, itself
    relative to the workspace) resolves outside the workspace, else None.

    '..' is normalised; when the workspace exists on disk, symlinks of the existing prefix are
    resolved (a link inside the workspace pointing outside leaves it). ``~`` paths leave it.
    Without a workspace, absolute paths and paths normalising to '..' leave it."""
    if path.startswith("~") or (cwd is not None and cwd.startswith("~")):
        return f"leaves the workspace ({path}: home directory)"
    target, root = _target(path, workspace, cwd)
    if root is None:
        if posixpath.isabs(target):
            return f"leaves the workspace ({path}: absolute path)"
        if target == ".." or target.startswith("../"):
            return f"leaves the workspace ({path})"
        return None
    if not _inside(target, root):
        return f"leaves the workspace ({path})"
    if os.path.isdir(root):
        real_root = os.path.realpath(root)
        real_target = os.path.realpath(target)
        if not _inside(real_target, real_root):
            return f"leaves the workspace through a symlink ({path} -> {real_target})"
    return None


def _leaving_level(path: str, workspace: str | os.PathLike[str] | None, cwd: str | None) -> RiskLevel:
    target, root = _target(path, workspace, cwd)
    candidates = [target]
    if root is not None and os.path.isdir(root):
        candidates.append(os.path.realpath(target))
    if any(posixpath.isabs(c) and _system(c) for c in candidates):
        return RiskLevel.CRITICAL
    return RiskLevel.HIGH


def assess_paths(
    paths: Iterable[str], *, workspace: str | os.PathLike[str] | None, cwd: str | None = None
) -> list[Finding]:
    """Findings for paths a request touches: a credential path is HIGH; leaving the workspace is
    HIGH, CRITICAL when the target is a system path (``SYSTEM_PREFIXES`` or ``/``)."""
    from orchestrator.gate.risk import Finding  # noqa: PLC0415 (risk imports this module)

    findings: list[Finding] = []
    for path in paths:
        credential = credential_reason(path)
        if credential is not None:
            findings.append(Finding(RiskLevel.HIGH, f"{credential}: {path}"))
        leaves = escapes_workspace(path, workspace=workspace, cwd=cwd)
        if leaves is not None:
            findings.append(Finding(_leaving_level(path, workspace, cwd), f"path {leaves}"))
    return findings
