"""Python client of the service: ``Client`` (blocking) and ``AsyncClient``. Results are the service's wire
models; refusals raise the very exception classes the library raises (``POLICY.DENIED`` →
``PolicyDenied``...). Depends on the domain only."""

from orchestrator.client.aio import AsyncClient
from orchestrator.client.sync import Client

__all__ = ["AsyncClient", "Client"]
