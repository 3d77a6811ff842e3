"""The CI tier's fixtures: the engine (skips without one; no sandbox of this run left at the end), as the API
tier's."""

from __future__ import annotations

from tests.api.conftest import engine

__all__ = ["engine"]
