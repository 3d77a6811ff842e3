"""Typed identifiers: distinct types for strings that must not be mixed up."""

from __future__ import annotations

import secrets
import time
from typing import NewType

ExecutionId = NewType("ExecutionId", str)
ApprovalKey = NewType("ApprovalKey", str)
SessionId = NewType("SessionId", str)
PolicyVersionHash = NewType("PolicyVersionHash", str)
ProfileHash = NewType("ProfileHash", str)


def new_execution_id() -> ExecutionId:
    """Time-ordered, unguessable: ``ex-<ms since epoch, hex>-<64 random bits>``."""
    return ExecutionId(f"ex-{int(time.time() * 1000):x}-{secrets.token_hex(8)}")
