"""Path analysis: credential files, and paths that leave the workspace (also through symlinks).

Credential matching works on path components, case-insensitively, and also inside words that keep
an expansion as source text (``"$HOME/.ssh/id_rsa"``): quotes, ``=`` and ``:`` count as component
boundaries, so option values (``--key=~/.ssh/k``) and ``user:path`` forms are seen too. Empty and
``.`` components are ignored and ``..`` is folded lexically (``/etc//shadow``, ``/etc/./shadow`` and
``/etc/ssl/../shadow`` all name ``/etc/shadow``); both the written and the folded forms are checked.

The shell expands some words before a program sees them, so the analyzer does too:

* brace expansion (``/etc/{shadow,x}``, ``id_{rsa,dsa}``, ``{1..3}``; nested; at most
  ``MAX_BRACE_WORDS`` words) - every expanded word is checked;
* pathname expansion (``*``, ``?``, ``[…]`` with ``!``/``^`` negation and ``[:class:]``): a glob
  component is matched the way bash matches it (a leading ``.`` must be matched explicitly)
  against concrete credential names (``GLOB_NAMES``: ``.env``, ``id_rsa``, ``credentials``, ...),
  against the credential extensions (``*.pe?`` may match ``x.pem``) and, component by component,
  against credential paths (``GLOB_SEQUENCES``: ``/etc/shad*``, ``/e??/shadow``,
  ``/proc/*/environ``). A component made only of ``*``/``?`` is not matched against names (``cat *``
  would flag every glob) - it still is inside a sequence (``/etc/*`` may match ``/etc/shadow``). The
  reason then reads "glob may match a credential path (LABEL)";
* ``glob_reason``: any glob in a path under ``/etc``, ``/root``, ``/home``, ``/proc``, ``/sys``,
  ``/run``, ``/var/run``, ``/dev``, ``/boot`` or the home directory (``~``, ``$HOME``) - the risk
  analyzer makes that MEDIUM (it reads unknown files outside the workspace).

Globs are matched even inside quotes (the analyzer sees unquoted words): a literal ``*`` in a file
name is flagged too, which errs on the safe side.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Iterable, Iterator

from orchestrator.domain.sanitized import RiskLevel
from orchestrator.gate.findings import Finding

__all__ = [
    "GLOB_NAMES",
    "GLOB_SEQUENCES",
    "MAX_BRACE_WORDS",
    "SYSTEM_PREFIXES",
    "assess_paths",
    "credential_reason",
    "escapes_workspace",
    "expand_braces",
    "glob_reason",
    "has_glob",
]

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
_KEY_EXTENSION_ORDER = ("pem", "key", "p12", "pfx", "jks", "keystore", "kdbx", "ppk")
_KEY_EXTENSIONS = frozenset(_KEY_EXTENSION_ORDER)
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


def _literal_label(parts: list[str]) -> str | None:
    for i in range(len(parts)):
        if parts[i]:
            label = _component_label(parts, i)
            if label is not None:
                return label
    return None


def _folded(parts: list[str]) -> list[str] | None:
    """Components without empty and '.' ones, '..' folded; None when nothing changes."""
    if not any(p in ("", ".", "..") for p in parts[1:]):
        return None
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            continue
        out.append(part)
    return out


# --------------------------------------------------------------------------------------------
# shell expansions: braces and globs

MAX_BRACE_WORDS = 256
"""Brace expansion stops after this many words (``{1..100000}`` is not expanded in full)."""

_GLOB = re.compile(r"[*?\[]")
_BRACE_HINT = re.compile(r"(?<!\$)\{[^}]*(?:,|\.\.)")
_SEQUENCE = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?|([^\\])\.\.([^\\])(?:\.\.(-?\d+))?")
_ONLY_WILDCARDS = frozenset("*?")


def has_glob(word: str) -> bool:
    """Whether ``word`` contains a pathname-expansion character (``*``, ``?``, ``[``)."""
    return _GLOB.search(word) is not None


def _sequence(body: str, limit: int) -> list[str] | None:
    m = _SEQUENCE.fullmatch(body)
    if m is None:
        return None
    if m.group(1) is not None:
        first, last, step = int(m.group(1)), int(m.group(2)), abs(int(m.group(3) or 1)) or 1
        values: Iterator[int] = iter(range(first, last + 1, step) if first <= last else range(first, last - 1, -step))
        return [str(v) for _, v in zip(range(limit), values, strict=False)]
    a, b, step = ord(m.group(4)), ord(m.group(5)), abs(int(m.group(6) or 1)) or 1
    codes = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
    return [chr(c) for _, c in zip(range(limit), codes, strict=False)]


def _first_brace(word: str, limit: int) -> tuple[int, int, list[str]] | None:
    """(start, end, alternatives) of the first brace expression bash would expand, or None."""
    start = word.find("{")
    while start >= 0:
        if start == 0 or word[start - 1] not in "$\\":
            depth = 0
            commas: list[int] = []
            end = -1
            i = start
            while i < len(word):
                ch = word[i]
                if ch == "\\":
                    i += 2
                    continue
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        end = i
                        break
                elif ch == "," and depth == 1:
                    commas.append(i)
                i += 1
            # a "{" without its "}" is a literal, as in bash: a brace expression may follow it
            if end >= 0 and commas:
                bounds = [start, *commas, end]
                return start, end, [word[bounds[k] + 1 : bounds[k + 1]] for k in range(len(bounds) - 1)]
            values = _sequence(word[start + 1 : end], limit) if end >= 0 else None
            if values is not None:
                return start, end, values
        start = word.find("{", start + 1)
    return None


def expand_braces(word: str, limit: int = MAX_BRACE_WORDS) -> list[str]:
    """The words bash's brace expansion makes of ``word`` (``a{b,c}`` → ``ab``, ``ac``), in order,
    at most ``limit`` of them; ``word`` itself when it has no brace expression."""
    if "{" not in word or _BRACE_HINT.search(word) is None:
        return [word]
    out: list[str] = []
    stack = [word]
    steps = 0
    while stack and len(out) < limit and steps < 8 * limit:
        steps += 1
        current = stack.pop()
        found = _first_brace(current, limit)
        if found is None:
            out.append(current)
            continue
        start, end, alternatives = found
        head, tail = current[:start], current[end + 1 :]
        stack.extend(head + alt + tail for alt in reversed(alternatives))
    return out


GLOB_NAMES: tuple[tuple[str, str], ...] = (
    *((name, ".env") for name in (".env", ".env.local", ".env.production", ".env.prod", ".env.development")),
    *((name, ".env") for name in (".env.dev", ".env.staging", ".env.test", ".env.live")),
    *((name, label) for name, label in _NAMES.items()),
    *((name, "id_*") for name in ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk")),
    *(
        (name, name)
        for name in (
            "credentials.json",
            "credentials.yaml",
            "credentials.yml",
            "credentials.toml",
            "secrets.json",
            "secrets.yaml",
            "secrets.yml",
            "secrets.toml",
            "secrets.env",
            "secret.json",
            "secret.yaml",
            "kubeconfig.yaml",
        )
    ),
)
"""(concrete lower-case name, label): what a glob component is matched against."""

GLOB_SEQUENCES: tuple[tuple[tuple[str, ...], str], ...] = (
    *((("etc", name), label) for name, label in _ETC_SECRETS.items()),
    (("etc", "security", "opasswd"), "/etc/security/opasswd"),
    *((("etc", "ssh", f"ssh_host_{kind}_key"), "ssh host key") for kind in ("rsa", "dsa", "ecdsa", "ed25519")),
    (("proc", "self", "environ"), "process environ"),
    (("proc", "1", "environ"), "process environ"),
    (("proc", "self", "task", "1", "environ"), "process environ"),
    (("run", "secrets"), "run/secrets"),
    ((".kube", "config"), ".kube/config"),
    ((".docker", "config.json"), ".docker/config.json"),
    ((".config", "gcloud"), "gcloud"),
)
"""(lower-case components, label): credential paths a glob is matched against, component-wise."""


_CLASSES = {
    "alpha": "a-zA-Z",
    "upper": "a-zA-Z",
    "lower": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "xdigit": "0-9a-fA-F",
    "word": "\\w",
    "space": "\\s",
    "blank": " \\t",
    "punct": "!-/:-@\\[-`{-~",
    "print": " -~",
    "graph": "!-~",
    "cntrl": "\\x00-\\x1f",
}


def _bracket(pattern: str, i: int) -> tuple[str, int] | None:
    """The regex class for the bracket expression opening at ``pattern[i]`` and the index after it."""
    n = len(pattern)
    j = i + 1
    negate = j < n and pattern[j] in "!^"
    if negate:
        j += 1
    parts: list[str] = []
    first = True
    while j < n and (pattern[j] != "]" or first):
        ch = pattern[j]
        first = False
        if ch == "[" and j + 1 < n and pattern[j + 1] in ":.=":
            kind = pattern[j + 1]
            close = pattern.find(kind + "]", j + 2)
            if close < 0:
                return None
            name = pattern[j + 2 : close]
            parts.append(_CLASSES.get(name, "") if kind == ":" else re.escape(name))
            j = close + 2
            continue
        parts.append("-" if ch == "-" else re.escape(ch))
        j += 1
    if j >= n:
        return None
    body = "".join(parts) or "\\x00"
    return ("[^\\n" if negate else "[") + body + "]", j + 1


@functools.lru_cache(maxsize=4096)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """bash pathname matching of one component as a regex (for ``fullmatch``)."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            out.append("[^\\n]*")
        elif ch == "?":
            out.append("[^\\n]")
        elif ch == "[" and (found := _bracket(pattern, i)) is not None:
            out.append(found[0])
            i = found[1]
            continue
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out))


_WILDCARD = re.compile(r"[*?\[\]]")


@functools.lru_cache(maxsize=4096)
def _literal_ends(pattern: str) -> tuple[str, str]:
    """The literal text before the first and after the last wildcard: a cheap first test."""
    first = _WILDCARD.search(pattern)
    if first is None:
        return pattern, pattern
    last = max(pattern.rfind("*"), pattern.rfind("?"), pattern.rfind("]"))
    return pattern[: first.start()], pattern[last + 1 :]


def _component_matches(name: str, pattern: str) -> bool:
    """bash pathname matching of one component (a leading '.' must be matched literally)."""
    if "*" not in pattern and "?" not in pattern and "[" not in pattern:
        return name == pattern
    if name.startswith(".") and not pattern.startswith("."):
        return False
    head, tail = _literal_ends(pattern)
    if not name.startswith(head) or not name.endswith(tail) or len(name) < len(head) + len(tail):
        return False
    return _glob_regex(pattern).fullmatch(name) is not None


_SEQUENCES_BY_FIRST: dict[str, list[tuple[tuple[str, ...], str]]] = {
    first: [(seq, label) for seq, label in GLOB_SEQUENCES if seq[0] == first]
    for first in dict.fromkeys(seq[0] for seq, _ in GLOB_SEQUENCES)
}


def _candidates(names: Iterable[tuple[str, str]], pattern: str) -> Iterator[tuple[str, str]]:
    """The (name, label) pairs whose name ``pattern`` matches."""
    head, tail = _literal_ends(pattern)
    dot = pattern.startswith(".")
    least = len(head) + len(tail)
    for name, label in names:
        if (
            name.startswith(head)
            and name.endswith(tail)
            and len(name) >= least
            and (dot or name[0] != ".")
            and _glob_regex(pattern).fullmatch(name) is not None
        ):
            yield name, label


def _glob_label(parts: list[str]) -> str | None:
    globbed = [_GLOB.search(p) is not None for p in parts]
    n = len(parts)
    for i in range(n):
        for first, group in _SEQUENCES_BY_FIRST.items():
            if not _component_matches(first, parts[i]):
                continue
            for sequence, label in group:
                k = len(sequence)
                if (
                    i + k <= n
                    and any(globbed[i : i + k])
                    and all(_component_matches(sequence[j], parts[i + j]) for j in range(1, k))
                ):
                    return label
    for comp, glob in zip(parts, globbed, strict=True):
        if not glob:
            continue
        if not set(comp) <= _ONLY_WILDCARDS:
            for _, label in _candidates(GLOB_NAMES, comp):
                return label
        _, dot, ext = comp.rpartition(".")
        if dot and _GLOB.search(ext):
            for known, _ in _candidates(_EXTENSION_PAIRS, ext):
                return f"*.{known}"
    return None


_EXTENSION_PAIRS = tuple((ext, ext) for ext in _KEY_EXTENSION_ORDER)


_POSIX_CLASS = re.compile(r"\[([:.=])(\w*)\1\]")
_POSIX_RANGES = {"alpha": "a-z", "upper": "a-z", "lower": "a-z", "digit": "0-9", "alnum": "a-z0-9", "xdigit": "0-9a-f"}


def _posix_class(m: re.Match[str]) -> str:
    """``[:alpha:]`` inside a bracket as plain ranges (``:`` would split the component)."""
    if m.group(1) != ":":
        return m.group(2)
    return _POSIX_RANGES.get(m.group(2), " -~")


def _reason(path: str) -> str | None:
    glob = _GLOB.search(path) is not None
    if not glob and _MAYBE.search(path) is None:
        return None
    text = path.lower()
    if glob and "[" in text:
        text = _POSIX_CLASS.sub(_posix_class, text)
    parts = _SPLIT.split(text)
    folded = _folded(parts)
    label = _literal_label(parts)
    if label is None and folded is not None:
        label = _literal_label(folded)
    if label is not None:
        return f"credential path ({label})"
    if glob:
        label = _glob_label(parts)
        if label is None and folded is not None:
            label = _glob_label(folded)
        if label is not None:
            return f"glob may match a credential path ({label})"
    return None


@functools.lru_cache(maxsize=4096)
def _expanded_reason(path: str) -> str | None:
    for word in expand_braces(path):
        reason = _reason(word)
        if reason is not None:
            return reason
    return None


def credential_reason(path: str) -> str | None:
    """``"credential path (.ssh)"`` when ``path`` names a credential file or directory,
    ``"glob may match a credential path (/etc/shadow)"`` when a glob in it may, else None."""
    if ("{" in path or _GLOB.search(path) is not None) and len(path) <= 4096:
        return _expanded_reason(path)
    return _reason(path)


_GLOB_ROOTS = {
    "/etc": "/etc",
    "/root": "/root",
    "/home": "/home",
    "/proc": "/proc",
    "/sys": "/sys",
    "/run": "/run",
    "/var/run": "/var/run",
    "/dev": "/dev",
    "/boot": "/boot",
    "$home": "$HOME",
    "${home}": "$HOME",
}


def glob_reason(word: str) -> str | None:
    """``"glob in a path under /etc"`` when a glob in ``word`` (or in an option value, after ``=``)
    reads outside the workspace in a sensitive tree, else None."""
    if _GLOB.search(word) is None:
        return None
    text = word.replace('"', "").replace("'", "").lower()
    for segment in re.split(r"[=:]", text) if ("=" in text or ":" in text) else (text,):
        if not _GLOB.search(segment):
            continue
        if segment.startswith("~"):
            return "glob in a path under ~"
        if segment.startswith(("/", "$")):
            normal = posixpath.normpath(segment) if segment.startswith("/") else segment
            for root, shown in _GLOB_ROOTS.items():
                if normal == root or normal.startswith(root + "/"):
                    return f"glob in a path under {shown}"
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
    findings: list[Finding] = []
    for path in paths:
        credential = credential_reason(path)
        if credential is not None:
            findings.append(Finding(RiskLevel.HIGH, f"{credential}: {path}"))
        leaves = escapes_workspace(path, workspace=workspace, cwd=cwd)
        if leaves is not None:
            findings.append(Finding(_leaving_level(path, workspace, cwd), f"path {leaves}"))
    return findings
