"""The request's environment keys: which change what programs run (never their values: those are secret)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.gate.findings import HIGH, MEDIUM, Finding

__all__ = ["ENV_KEYS", "ENV_PREFIXES", "ENV_SUFFIXES", "assess_env", "changes_programs"]

ENV_KEYS: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "PATH",
            "BASH_ENV",
            "ENV",
            "PROMPT_COMMAND",
            "SHELLOPTS",
            "BASHOPTS",
            "PS0",
            "PS1",
            "PS2",
            "PS3",
            "PS4",
            "IFS",
            "FPATH",
            "ZDOTDIR",
            "BASH_LOADABLES_PATH",
            "FCEDIT",
            "SHELL",
            "HOME",
            "XDG_CONFIG_HOME",
            "CLASSPATH",
            "MFLAGS",
            "VISUAL",
            "BROWSER",
            "RIPGREP_CONFIG_PATH",
            "GCONV_PATH",
            "PHPRC",
            "TCLLIBPATH",
            "GOFLAGS",
            "GOENV",
            "CC",
            "CXX",
            "CPP",
            "OPENSSL_CONF",
            "OPENSSL_ENGINES",
            "WGETRC",
            "CURL_HOME",
            "TAR_OPTIONS",
            "MANOPT",
            "PARALLEL",
            "PARALLEL_SHELL",
            "GROFF_BIN_PATH",
            "VALGRIND_OPTS",
            "ZIPOPT",
            "UNZIP",
            "UNZIPOPT",
            "RSYNC_RSH",
            "RSYNC_CONNECT_PROG",
            "CVS_RSH",
            "KUBECONFIG",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
            "DOCKER_CONFIG",
            "SSLKEYLOGFILE",
        ),
        "high",
    ),
    **dict.fromkeys(("CDPATH", "GLOBIGNORE"), "medium"),
}
"""Exact keys (compared upper-cased): ``high`` changes what programs run (or what they load, or
where their configuration comes from: ``HOME`` brings ``~/.gitconfig``, whose core.fsmonitor runs
on ``git status``); ``medium`` changes which files the shell finds."""
ENV_PREFIXES: tuple[str, ...] = (
    "LD_",
    "DYLD_",
    "BASH_FUNC_",
    "GIT_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "NPM_CONFIG_",
    "LESS",
    "JAVA_",
    "_JAVA_",
    "JDK_JAVA_",
    "MAKE",
    "LUA_",
    "RUSTC_",
    "RUSTFLAGS",
    "CARGO_",
    "GEM_",
    "BUNDLE_",
    "PHP_",
    "R_PROFILE",
    "R_ENVIRON",
    "R_LIBS",
    "JULIA_",
    "DENO_",
    "BUN_",
)
"""Key prefixes that are high (``LD_PRELOAD``, ``GIT_SSH_COMMAND``, ``PYTHONPATH``, ``NODE_OPTIONS``,
``LESSOPEN``, ``MAKEFLAGS``, exported functions ``BASH_FUNC_*``, ...)."""
ENV_SUFFIXES: tuple[str, ...] = ("EDITOR", "PAGER", "ASKPASS")
"""Key suffixes that are high: programs other tools run (``EDITOR``, ``GIT_PAGER``, ``SSH_ASKPASS``)."""
_PROXY_SUFFIX = "_PROXY"


def changes_programs(key: str) -> bool:
    """Whether a variable of this name changes what programs run or load (``BASH_ENV``, ``PS4``,
    ``LD_PRELOAD``, ``GIT_*``, ``PATH``, ``*_EDITOR``…): code from its value the gate does not see."""
    upper = key.upper()
    level = ENV_KEYS.get(upper)
    return level == "high" or (level is None and (upper.startswith(ENV_PREFIXES) or upper.endswith(ENV_SUFFIXES)))


def assess_env(keys: Iterable[str]) -> list[Finding]:
    """Findings for the environment keys of a request (keys are not secret: they appear in reasons;
    values never do). High: ``env KEY changes what programs run``; medium: ``CDPATH``, ``GLOBIGNORE``
    (which files the shell finds) and ``*_PROXY`` (where network traffic goes)."""
    out: list[Finding] = []
    for key in keys:
        upper = key.upper()
        level = ENV_KEYS.get(upper)
        if changes_programs(key):
            out.append(Finding(HIGH, f"env {key} changes what programs run"))
        elif level == "medium":
            out.append(Finding(MEDIUM, f"env {key} changes which files the shell finds"))
        elif upper.endswith(_PROXY_SUFFIX):
            out.append(Finding(MEDIUM, f"env {key} routes network traffic"))
    return out
