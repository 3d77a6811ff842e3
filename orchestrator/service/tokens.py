"""Bearer tokens from the config: each secret read from the config, a file or an environment variable,
kept only as its sha256 (the service compares digests, in constant time)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.domain.principal import Principal, Role
from orchestrator.pipeline.config import TokenEntry

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True, slots=True)
class Credential:
    principal: Principal
    digest: bytes  # sha256 of the token


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def _secret(entry: TokenEntry, field: str) -> str:
    if entry.token is not None:
        return entry.token
    if entry.token_file is not None:
        try:
            lines = Path(entry.token_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigInvalid(
                f"{field}.token_file: cannot be read ({type(err).__name__})",
                details={"fields": [f"{field}.token_file"]},
            ) from None
        return lines[0].strip() if lines else ""
    assert entry.token_env is not None
    return os.environ.get(entry.token_env, "")


def load_credentials(entries: list[TokenEntry]) -> list[Credential]:
    """CONFIG.INVALID names the entry (never the secret) when a secret is missing, short or repeated."""
    out: list[Credential] = []
    seen: set[bytes] = set()
    for number, entry in enumerate(entries):
        field = f"service.tokens.{number}"
        secret = _secret(entry, field)
        if len(secret) < MIN_TOKEN_CHARS:
            raise ConfigInvalid(
                f"{field}: the token of {entry.subject} is missing or shorter than {MIN_TOKEN_CHARS} characters",
                details={"fields": [field]},
            )
        digest = token_digest(secret)
        if digest in seen:
            raise ConfigInvalid(f"{field}: the same token is given twice", details={"fields": [field]})
        seen.add(digest)
        principal = Principal(subject=entry.subject, role=Role(entry.role), tenants=frozenset(entry.tenants))
        out.append(Credential(principal, digest))
    return out
