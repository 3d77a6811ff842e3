"""What the warm server's preloaded code was built from: a changed file means it must not serve."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import orchestrator

PACKAGE_DIR = Path(orchestrator.__file__).resolve().parent


def _package_files(root: Path) -> Iterable[str]:
    # the package's code and its data (default policy, built-in profiles, seccomp files); links are
    # followed (the built-in profiles are one) but every directory is walked once
    seen: set[tuple[int, int]] = set()
    for directory, dirnames, filenames in os.walk(root, followlinks=True):
        st = os.stat(directory)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".yaml", ".json")):
                yield os.path.join(directory, name)


def _module_files() -> Iterable[str]:
    # every library module loaded (an upgraded pydantic or docker changes these)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            yield path


def code_fingerprint() -> str:
    """A digest of (path, inode, size, mtime, ctime) of the package's files and of every loaded
    module's file: an edit shows even when a copy kept the old mtime (ctime cannot be set back).
    Stat only: ~1,000 files cost a few milliseconds."""
    digest = hashlib.sha256()
    for path in sorted({*_package_files(PACKAGE_DIR), *_module_files()}):
        try:
            st = os.stat(path)
            digest.update(f"{path}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
        except OSError:
            digest.update(f"{path}\0gone\n".encode())
    return digest.hexdigest()
