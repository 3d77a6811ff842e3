"""Bearer tokens → principals (compared in constant time, never logged), and a per-token rate limit."""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass

from aiohttp import web

from orchestrator.domain.errors import RateLimited, Unauthorized
from orchestrator.domain.principal import Principal
from orchestrator.service.tokens import Credential, token_digest

PRINCIPAL_KEY = web.AppKey("principal", Principal)


class TokenBook:
    def __init__(self, credentials: list[Credential]) -> None:
        self._credentials = credentials

    def principal(self, authorization: str | None) -> Principal:
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized("send 'Authorization: Bearer <token>'")
        digest = token_digest(authorization[len("Bearer ") :].strip())
        found: Principal | None = None
        for credential in self._credentials:  # every entry compared: the time says nothing about which
            if hmac.compare_digest(credential.digest, digest):
                found = credential.principal
        if found is None:
            raise Unauthorized("unknown token")
        return found


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """A token bucket per subject: ``burst`` requests at once, then ``rate`` per second."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}

    def take(self, subject: str) -> None:
        now = time.monotonic()
        bucket = self._buckets.get(subject)
        if bucket is None:
            bucket = self._buckets[subject] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if bucket.tokens < 1:
            retry = (1 - bucket.tokens) / self.rate
            raise RateLimited(
                f"more than {self.rate:g} requests per second from this token",
                details={"retry_after_s": round(retry, 3)},
            )
        bucket.tokens -= 1
