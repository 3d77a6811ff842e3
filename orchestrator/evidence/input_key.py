"""The key of what is typed into sessions: their digests in the evidence are HMAC-SHA256 under it.

A plain sha256 hides only what is hard to guess: the digest of one keystroke, or of a short password,
is as good as its content to whoever reads the records. So input digests are keyed, with a random key
kept beside the evidence file (``<evidence>.input-key``, 0600, never in a record): whoever holds it can
still check an input against its record; a reader of the records alone cannot.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from orchestrator.domain.errors import EvidenceUnavailable

KEY_BYTES = 32
SUFFIX = ".input-key"


def input_key_path(evidence_path: Path) -> Path:
    return evidence_path.with_name(evidence_path.name + SUFFIX)


def load_input_key(evidence_path: Path) -> bytes:
    """The key beside ``evidence_path``, made (random, 0600) the first time; EVIDENCE.UNAVAILABLE when
    it cannot be read or made, or is not a key of ours."""
    path = input_key_path(evidence_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, secrets.token_bytes(KEY_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            key = os.read(fd, KEY_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise EvidenceUnavailable(f"the input key {path} cannot be read or made: {exc.strerror or exc}") from None
    if len(key) != KEY_BYTES:
        raise EvidenceUnavailable(f"{path} is not an input key ({len(key)} bytes, not {KEY_BYTES})")
    return key
