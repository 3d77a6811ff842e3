"""The HTTP service: the only place that imports aiohttp. ``build_app`` wires the routes of
:mod:`orchestrator.api.routes` over a :class:`orchestrator.service.hosting.Service`."""

from orchestrator.api.app import build_app, serve

__all__ = ["build_app", "serve"]
