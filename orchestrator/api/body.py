"""Request bodies: bounded in size (413 before reading past the limit) and in time, JSON, UTF-8."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from orchestrator.domain.errors import InputInvalid, RequestTooLarge


async def read_json(request: web.Request, max_bytes: int, timeout_s: float) -> Any:
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise RequestTooLarge(f"the body is larger than {max_bytes} bytes", details={"limit": max_bytes})
    try:
        async with asyncio.timeout(timeout_s):
            parts: list[bytes] = []
            size = 0
            while size <= max_bytes:  # read() returns what has arrived: read to the end, or past the limit
                part = await request.content.read(max_bytes + 1 - size)
                if not part:
                    break
                parts.append(part)
                size += len(part)
            raw = b"".join(parts)
    except TimeoutError:
        raise InputInvalid(f"the body did not arrive within {timeout_s:g}s") from None
    if len(raw) > max_bytes:
        raise RequestTooLarge(f"the body is larger than {max_bytes} bytes", details={"limit": max_bytes})
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputInvalid(f"the body is not UTF-8 (byte {err.start + 1})", details={"fields": ["(body)"]}) from None
    if not text.strip():
        raise InputInvalid("the body is empty: send a JSON object", details={"fields": ["(body)"]})
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputInvalid(
            f"the body is not JSON: {err.msg} at line {err.lineno} column {err.colno}", details={"fields": ["(body)"]}
        ) from None
    except RecursionError:
        raise InputInvalid("the body nests too deep", details={"fields": ["(body)"]}) from None
    except ValueError:  # an integer past Python's limit on digits
        raise InputInvalid("the body holds a number too large", details={"fields": ["(body)"]}) from None
