"""Interactive approval at a terminal. Only offered when stdin is a TTY: a pipe never approves."""

from __future__ import annotations

import asyncio
import getpass
import os
import shlex

from orchestrator.domain.ci import CiRecord
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import NoApprovalProvider
from orchestrator.domain.text import printable

_ANSWERS = {
    "y": ApprovalOutcome.APPROVED,
    "yes": ApprovalOutcome.APPROVED,
    "s": ApprovalOutcome.APPROVED_FOR_SESSION,
    "session": ApprovalOutcome.APPROVED_FOR_SESSION,
    "n": ApprovalOutcome.DENIED,
    "no": ApprovalOutcome.DENIED,
    "a": ApprovalOutcome.ABORT,
    "abort": ApprovalOutcome.ABORT,
}


def render_prompt(request: ApprovalRequest) -> str:
    """Every value shown is escaped (see domain.text.printable): what the approver reads is all there is."""
    s = request.sanitized
    p = printable
    what = s.command if s.command is not None else shlex.join(s.argv) if s.argv is not None else None
    lines = [f"Approval needed ({p(request.policy_reason)})", f"  tool:    {s.tool}"]
    if what is not None:
        lines.append(f"  command: {p(what)}")
    if s.script is not None:
        lines.append(f"  script:  {p(s.script.path)} ({s.script.bytes} bytes, {s.script.shown()})")
    if s.path is not None:
        lines.append(f"  path:    {p(s.path)} ({s.content.bytes if s.content else 0} bytes)")
    if s.patch_paths:
        lines.append(f"  patch:   {p(', '.join(s.patch_paths))}")
    if s.cwd is not None:
        lines.append(f"  cwd:     {p(s.cwd)}")
    if s.env_keys:
        lines.append(f"  env:     {', '.join(s.env_keys)} (values hidden)")
    lines.append(f"  risk:    {s.risk.risk_level} ({p(s.risk.reason)})")
    lines.append(f"  who:     {p(s.context.subject)}@{p(s.context.tenant)}")
    if s.context.ci is not None:
        lines.extend(f"  {label + ':':<8} {text}" for label, text in ci_lines(s.context.ci))
    lines.append(f"  key:     {request.approval_key[:16]}  timeout: {request.timeout_s:g}s")
    lines.append("Approve? [y]es / [s]ession / [n]o / [a]bort: ")
    return "\n".join(lines)


def ci_lines(ci: CiRecord) -> list[tuple[str, str]]:
    """The CI context of an ask as an approver reads it (every value escaped): which run, which job and step,
    which ref, from what event, started by whom."""
    p = printable
    run = f"{ci.provider} {p(ci.repository)} run {p(ci.run_id)}"
    if ci.attempt is not None:
        run += f" attempt {ci.attempt}"
    job = p(ci.job) if ci.workflow is None else f"{p(ci.workflow)} / {p(ci.job)}"
    if ci.job_id is not None:
        job += f" ({p(ci.job_id)})"
    lines = [("ci", run), ("job", f"{job}  key {ci.job_key[:16]}")]
    step = [f"stage {p(ci.stage)}"] if ci.stage is not None else []
    step += [p(ci.step)] if ci.step is not None else []
    step += [f"uses {p(ci.action)}"] if ci.action is not None else []
    if step:
        lines.append(("step", ", ".join(step)))
    origin = [p(ci.ref)] if ci.ref is not None else []
    origin += [f"on {p(ci.event)}"] if ci.event is not None else []
    origin += [f"by {p(ci.actor)}"] if ci.actor is not None else []
    if origin:
        lines.append(("ref", " ".join(origin)))
    return lines


class TerminalApprover:
    def __init__(self, fd_in: int = 0, fd_out: int = 2, user: str | None = None) -> None:
        if not os.isatty(fd_in):
            raise NoApprovalProvider("terminal approvals need a TTY on stdin; none is attached")
        self._fd_in = fd_in
        self._fd_out = fd_out
        self._user = user or _whoami()

    @property
    def name(self) -> str:
        return f"terminal:{self._user}"

    async def _read_line(self) -> str:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        buf = bytearray()

        def on_readable() -> None:
            chunk = os.read(self._fd_in, 1024)
            buf.extend(chunk if chunk else b"\n")
            if b"\n" in buf and not ready.done():
                ready.set_result(None)

        loop.add_reader(self._fd_in, on_readable)
        try:
            await ready
        finally:
            loop.remove_reader(self._fd_in)
        return buf.split(b"\n", 1)[0].decode("utf-8", "replace").strip().lower()

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        prompt = render_prompt(request)
        while True:
            os.write(self._fd_out, prompt.encode())
            answer = await self._read_line()
            outcome = _ANSWERS.get(answer)
            if outcome is not None:
                return ApprovalResult(outcome=outcome, approver=self.name, reason=f"answered {answer!r}")
            prompt = "Please answer y, s, n or a: "


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
