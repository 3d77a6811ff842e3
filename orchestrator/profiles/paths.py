"""Where profiles and seccomp profiles are found.

The search path is the built-in directory, then the directories of ``$SANDBOX_PROFILES_PATH``
(colon-separated); for a name found in several, the later directory wins. A directory listed more than once
counts once, at its last place: where it wins names, and where what its files override is looked up below
it. Built-ins live in the package as ``orchestrator/profiles/builtin`` (in the source tree a symlink to the
top-level ``profiles/`` directory, the source of truth; in a wheel the files themselves).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.domain.errors import ConfigInvalid

ENV_VAR = "SANDBOX_PROFILES_PATH"
SECCOMP_SUBDIR = "seccomp"


def builtin_dir() -> Path:
    """The built-in profiles directory shipped with the package."""
    here = Path(__file__).resolve().parent / "builtin"
    if not here.is_dir():
        raise ConfigInvalid(
            f"{here}: the built-in profiles directory is missing (was the package installed with its data?)",
            details={"file": str(here)},
        )
    return here.resolve()


def check_dir(path: str | os.PathLike[str], what: str) -> Path:
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ConfigInvalid(f"{what}: {directory}: not a directory", details={"file": str(directory)})
    return directory


def env_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The extra directories named by ``$SANDBOX_PROFILES_PATH`` (empty entries ignored)."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return [check_dir(part, ENV_VAR) for part in value.split(":") if part.strip()]


def default_search_path(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Built-ins first, then ``$SANDBOX_PROFILES_PATH`` in order (later wins; see :func:`once_each`)."""
    return once_each([builtin_dir(), *env_dirs(environ)])


def once_each(dirs: Sequence[Path]) -> tuple[Path, ...]:
    """``dirs`` with a directory listed more than once (the same once resolved) kept at its last place only.

    The last place is where it wins: a name is found in the last directory that has it, so ``p1:p2:p1``
    resolves names as ``p2:p1`` does, and an override in p1 builds on p2's (kept at its first place it would
    skip p2's, while p1 still won the name).
    """
    last = {d.resolve(): i for i, d in enumerate(dirs)}
    return tuple(d for i, d in enumerate(dirs) if last[d.resolve()] == i)


def find_in(search_path: Sequence[Path], relative: str) -> Path | None:
    """The last directory's ``relative`` file that exists, or None."""
    for directory in reversed(search_path):
        candidate = directory / relative
        if candidate.is_file():
            return candidate
    return None
