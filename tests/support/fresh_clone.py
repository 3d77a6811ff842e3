"""A fresh clone of the working tree, as a new user has it after `make venv`.

The files git would commit as they are now (edits and new files included: a changed doc is what runs),
copied to a new directory, with a virtual environment of its own in ``.venv``: the project installed from
the clone (``orchestrator`` imports from the clone, ``.venv/bin/sandboxctl`` is its entry point), its
dependencies those of this process's environment (a ``.pth`` file: installing them again from the package
index would test pip, which `make test` itself does from a bare clone). What a user's checkout looks like
matters: the code and the built-in profiles lie in it, so a command run there meets the same checks as
the user's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from tests.support.paths import ROOT

LAUNCHER = """#!{python}
import sys
from {module} import {function}
sys.exit({function}())
"""


def tracked_files() -> list[str]:
    listed = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    out = subprocess.run(listed, cwd=ROOT, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name]


def copy_tree(target: Path) -> None:
    for name in tracked_files():
        source = ROOT / name
        if not source.exists() and not source.is_symlink():  # deleted in the working tree
            continue
        dest = target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), dest)
        else:
            shutil.copy2(source, dest)


def make_venv(clone: Path) -> Path:
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the clone first (its orchestrator), then this environment's libraries
    (site / "_clone.pth").write_text(f"{clone}\n{sysconfig.get_path('purelib')}\n")
    scripts = tomllib.loads((clone / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, function = target.split(":")
        launcher = venv / "bin" / name
        launcher.write_text(LAUNCHER.format(python=python, module=module, function=function))
        launcher.chmod(0o755)
    for tool in ("ruff", "mypy", "lint-imports", "pytest"):  # what the Makefile's targets call from .venv/bin
        found = Path(sys.executable).parent / tool
        if found.exists():
            os.symlink(found, venv / "bin" / tool)
    subprocess.run([str(python), "-m", "compileall", "-q", str(clone / "orchestrator")], check=True)
    (venv / ".installed").touch()  # the Makefile's stamp: `make demo` finds the environment made
    return venv


def fresh_clone(target: Path) -> Path:
    """The clone at ``target`` (created), with its ``.venv``."""
    target.mkdir(parents=True)
    copy_tree(target)
    make_venv(target)
    return target
