"""How the driver finds the controller: ``SANDBOX_URL`` and ``SANDBOX_TOKEN_FILE`` or ``SANDBOX_TOKEN``, as the
GitHub hook (``orchestrator/ci/github/hook.js``) reads them. The CI job calls are the client's own
(``Client.open_ci_job``, ``run_ci_step``, ``close_ci_job``)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.client.sync import Client
from orchestrator.domain.errors import SandboxUnavailable

__all__ = ["client_from_env"]


def client_from_env(env: Mapping[str, str], *, timeout_s: float = 60.0) -> Client:
    """The controller the environment names; SANDBOX.UNAVAILABLE saying what is missing (our side: a system
    failure, never the job's)."""
    url = env.get("SANDBOX_URL")
    if not url:
        raise SandboxUnavailable("SANDBOX_URL is not set (the sandbox controller, e.g. http://sandbox:8080)")
    token_file = env.get("SANDBOX_TOKEN_FILE")
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as err:
            raise SandboxUnavailable(f"SANDBOX_TOKEN_FILE cannot be read: {err.strerror or err}") from None
    else:
        token = (env.get("SANDBOX_TOKEN") or "").strip()
    if not token:
        raise SandboxUnavailable(
            "no token: set SANDBOX_TOKEN or SANDBOX_TOKEN_FILE (a token of the sandbox controller)"
        )
    try:
        return Client(url, token, timeout_s=timeout_s)
    except Exception as err:  # InputInvalid for a URL that is not http(s)://host
        raise SandboxUnavailable(f"SANDBOX_URL is not usable: {err}") from None
