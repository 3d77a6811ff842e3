"""How an image is named: a reference with an explicit tag or digest (never an implicit :latest), as the engine
reads it. A profile names its image; a CI job's request may name another, which the config's caps must allow
(``caps.allowed_images``): nothing is ever pulled, the engine must already hold it."""

from __future__ import annotations

# [registry[:port]/]path[:tag][@sha256:digest], a tag or a digest is required (no implicit :latest)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (
    # a registry host has a dot or a port, or is localhost (as Docker decides)
    r"^(?:(?:(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|localhost)(?::[0-9]+)?|[A-Za-z0-9-]+:[0-9]+)/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64}|:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
    r"@sha256:[0-9a-f]{64})$"
)
IMAGE_MAX = 512
