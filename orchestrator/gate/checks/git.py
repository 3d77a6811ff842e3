"""git: global options that run programs or leave the workspace, subcommands that rewrite history,
delete files or run commands, configuration that names programs."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.gate.findings import HIGH, MEDIUM, Check, Finding
from orchestrator.gate.programs import lookup, scan
from orchestrator.gate.programs.git import EXEC_CONFIG, SAFE_CONFIG

_PATH_OPTIONS = frozenset({"-C", "--git-dir", "--work-tree"})
_CONFIGURES = "sets configuration that can run programs"


def _outside(path: str) -> bool:
    """A path that is not plainly inside the workspace: absolute, ``~``, ``..`` or computed."""
    text = path.replace('"', "").replace("'", "")
    return text.startswith(("/", "~", "$")) or ".." in text.split("/") or "`" in text


def _config_key(word: str) -> str:
    key = word.split("=", 1)[0]
    return key if len(key) <= 60 else key[:57] + "..."


def _git(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    found = scan(lookup("git"), words)
    sub_at = found.positionals[0] if found.positionals else len(words)
    for hit in found.hits:
        if hit.pos >= sub_at or hit.opt is None:
            continue
        name, value = hit.opt.name, hit.value
        if name == "-c" and value is not None and not SAFE_CONFIG.fullmatch(value.split("=", 1)[0]):
            out.append(Finding(HIGH, f"{prog} -c {_config_key(value)} {_CONFIGURES}"))
        elif name == "--config-env" and value is not None:
            out.append(Finding(HIGH, f"{prog} --config-env {_config_key(value)} {_CONFIGURES}"))
        elif name == "--exec-path" and value is not None:
            out.append(Finding(HIGH, f"{prog} --exec-path= runs git programs from another directory"))
        elif name in _PATH_OPTIONS and value is not None and _outside(value):
            if name == "--work-tree":
                out.append(Finding(MEDIUM, f"{prog} --work-tree reads a tree outside the workspace"))
            else:
                why = "uses a repository outside the workspace (its configuration can run programs)"
                out.append(Finding(HIGH, f"{prog} {name} {why}"))
    if not found.positionals:
        return
    sub = words[sub_at]
    flags = found.flags
    rest = tuple(words[i] for i in found.positionals[1:])
    if sub == "push" and "--force" in flags:
        out.append(Finding(MEDIUM, f"{prog} push --force rewrites remote history"))
    elif sub == "reset" and "--hard" in flags:
        out.append(Finding(MEDIUM, f"{prog} reset --hard discards local changes"))
    elif sub == "clean" and "--force" in flags and "--dry-run" not in flags:
        what = "untracked and ignored files" if ("-x" in flags or "-X" in flags) else "untracked files"
        out.append(Finding(MEDIUM, f"{prog} clean -f deletes {what}"))
    elif sub == "submodule" and "foreach" in rest:
        out.append(Finding(HIGH, f"{prog} submodule foreach runs a command"))
    elif sub == "bisect" and rest[:1] == ("run",):
        out.append(Finding(HIGH, f"{prog} bisect run runs a command"))
    elif sub == "filter-branch":
        out.append(Finding(HIGH, f"{prog} filter-branch runs filter commands"))
    elif sub == "config":
        keys = rest[1:2] if rest[:1] and rest[0] in ("set", "--add") else rest[:1] if len(rest) >= 2 else ()
        for key in keys:
            if EXEC_CONFIG.fullmatch(key):
                out.append(Finding(HIGH, f"{prog} config {_config_key(key)} sets a program git will run"))


CHECKS: dict[str, Check] = {"git": _git}
