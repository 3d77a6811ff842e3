"""The controller's CI job routes (``/v1/ci/jobs``, ``domain/routes.py``) over the blocking client, and how the
driver finds the controller: ``SANDBOX_URL`` and ``SANDBOX_TOKEN_FILE`` or ``SANDBOX_TOKEN``, as the GitHub
hook (``orchestrator/ci/github/hook.js``) reads them."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.client import core
from orchestrator.client.sync import Client
from orchestrator.domain import routes
from orchestrator.domain.ci_jobs import CiJobRequest, CiJobView, CiStepRequest
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.wire import ExecutionView, SubmitAnswer

__all__ = ["CiClient", "client_from_env"]


class CiClient(Client):
    """The client, with the CI job calls (open, step, close)."""

    def open_job(self, request: CiJobRequest) -> CiJobView:
        body = request.model_dump(mode="json", exclude_none=True)
        return core.decode(
            CiJobView, *self._send(core.Call(routes.OPEN_CI_JOB.method, routes.OPEN_CI_JOB.url(), body=body))
        )

    def step(self, job_id: str, request: CiStepRequest, *, wait: float | None = None) -> ExecutionView:
        """Submit a step (202: decided, pending or running; 200: ended within ``wait``)."""
        query = {routes.WAIT.name: f"{wait:g}"} if wait else {}
        call = core.Call(
            routes.RUN_CI_STEP.method,
            routes.RUN_CI_STEP.url(id=job_id),
            query,
            request.model_dump(mode="json", exclude_none=True),
        )
        status, body = self._send(call, read_timeout=(wait or 0) + self._timeout)
        return core.decode(SubmitAnswer, status, body).execution

    def close_job(self, job_id: str) -> CiJobView:
        return core.decode(
            CiJobView, *self._send(core.Call(routes.CLOSE_CI_JOB.method, routes.CLOSE_CI_JOB.url(id=job_id)))
        )


def client_from_env(env: Mapping[str, str], *, timeout_s: float = 60.0) -> CiClient:
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
        return CiClient(url, token, timeout_s=timeout_s)
    except Exception as err:  # InputInvalid for a URL that is not http(s)://host
        raise SandboxUnavailable(f"SANDBOX_URL is not usable: {err}") from None
