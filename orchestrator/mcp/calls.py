"""One tool call, start to end: its arguments as a request of the governed path, the wait while a person
decides (progress with the time left), and the answer as a tool result. Refusals and limits are results marked
as errors with their stable code, for the model to react to; only malformed arguments are protocol errors
(``server``). A caller that goes away cancels what it started, on the record."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio

from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.mcp import McpContext
from orchestrator.domain.requests import DEFAULT_SESSION_OUTPUT_BYTES, MAX_SESSION_OUTPUT_BYTES
from orchestrator.domain.wire import ErrorBody, ExecutionState, ExecutionView, SessionAnswer
from orchestrator.mcp.controller import Controller
from orchestrator.mcp.tools import (
    BYTES_PER_TOKEN,
    ApplyPatchInput,
    ExecCommandInput,
    ReadFileInput,
    RunInput,
    WriteFileInput,
    WriteStdinInput,
    _Governed,
    _Input,
)

log = logging.getLogger(__name__)
#: while an ask waits, a progress notification this often (the time left with it)
ASK_TICK_S = 1.0
#: while a command runs, a progress notification this often
RUN_TICK_S = 5.0

Progress = Callable[[float, float | None, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What the tool returns: a short text for the model, the same as structured content, and whether it is a
    refusal or a failure (isError)."""

    text: str
    structured: dict[str, Any]
    is_error: bool


@dataclass(frozen=True, slots=True)
class CallContext:
    controller: Controller
    mcp: McpContext
    call_id: str | None
    progress: Progress


def refusal(err: OrchestratorError, execution_id: str | None = None) -> ToolAnswer:
    body = ErrorBody.of(err).model_dump(mode="json", exclude_none=True)
    structured: dict[str, Any] = {"error": body}
    if execution_id is not None:
        structured["execution_id"] = execution_id
    return ToolAnswer(f"refused: {err.code}: {err.message}", structured, True)


def _context(ctx: CallContext, tool: str) -> dict[str, Any]:
    """What every request of a call carries, write_stdin's too: its MCP context and call id (never from the
    arguments), recorded with the request."""
    raw: dict[str, Any] = {"mcp": ctx.mcp.model_copy(update={"tool": tool}).model_dump(exclude_none=True)}
    if ctx.call_id is not None:
        raw["call_id"] = ctx.call_id
    return raw


def _governed(args: _Governed, ctx: CallContext, tool: str) -> dict[str, Any]:
    """The fields every governed request of a call carries: its context, and what it asks."""
    raw = _context(ctx, tool)
    if args.profile is not None:
        raw["profile"] = args.profile
    if args.retry_of is not None:
        raw["retry_of"] = args.retry_of
    if args.sandbox_permissions is not None:
        raw["sandbox_permissions"] = args.sandbox_permissions.model_dump(exclude_none=True)
    return raw


def _cap(text: str, tokens: int | None) -> tuple[str, bool]:
    if tokens is None:
        return text, False
    limit = tokens * BYTES_PER_TOKEN
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


async def _until_final(ctx: CallContext, raw: dict[str, Any]) -> ExecutionView:
    """Submit and wait for the end, telling the caller how an ask goes. Cancelled (the client went away or
    cancelled the call): the execution is cancelled too, and the cancellation recorded."""
    view = await _submitted(ctx, raw)
    started = time.monotonic()
    try:
        while not view.state.final:
            if view.state is ExecutionState.PENDING_APPROVAL:  # told at once, then every tick
                await ctx.progress(time.monotonic() - started, None, _waiting(view))
                view = await ctx.controller.wait(view.execution_id, wait_s=ASK_TICK_S)
                continue
            view = await ctx.controller.wait(view.execution_id, wait_s=RUN_TICK_S)  # answered as it ends
            if not view.state.final:
                await ctx.progress(time.monotonic() - started, None, _waiting(view))
    except BaseException:
        # cancelled (or the wait itself failed: a forwarding controller that did not answer): the execution never
        # goes on for nobody. The SDK's cancel scope (anyio) cancels every await in it again: the cancellation is
        # recorded under a shield, before the call's end lets anything (a closing service) go on
        with anyio.CancelScope(shield=True):
            await _cancel(ctx.controller, view.execution_id)
        raise
    return view


async def _submitted(ctx: CallContext, raw: dict[str, Any]) -> ExecutionView:
    """The submit's answer, as soon as the request is decided (running, or its ask queued): the call then waits
    with the execution's id in hand. Cancelled meanwhile: the id comes only with that answer, so the submit is
    still waited for (shielded: the decision's time), and then its execution cancelled; a submit given up on
    would leave it running (or asking) for nobody."""
    submitting = asyncio.ensure_future(ctx.controller.submit(raw, wait_s=0.0))
    try:
        return await asyncio.shield(submitting)
    except asyncio.CancelledError:
        with anyio.CancelScope(shield=True):
            await asyncio.wait({submitting})
            if not submitting.cancelled() and submitting.exception() is None:  # a refusal: nothing to stop
                view = submitting.result()
                if not view.state.final:
                    await _cancel(ctx.controller, view.execution_id)
        raise


async def stop(task: asyncio.Future[Any]) -> None:
    """``task`` cancelled and waited for to its end (what it records on the way out included), shielded: the
    SDK's cancel scope (anyio) would cancel the wait itself again."""
    task.cancel()
    with anyio.CancelScope(shield=True):
        await asyncio.wait({task})


async def _cancel(controller: Controller, execution_id: str) -> None:
    try:
        await controller.cancel(execution_id)
    except OrchestratorError:  # it ended meanwhile (EXECUTION.NOT_RUNNING): nothing to stop
        pass
    except Exception:  # the call already ends with its own failure: this one is logged, never raised over it
        log.warning("MCP call: could not cancel %s", execution_id, exc_info=True)


def _waiting(view: ExecutionView) -> str:
    if view.state is ExecutionState.PENDING_APPROVAL and view.approval is not None:
        deadline = view.approval.deadline
        left = "" if deadline is None else f", {max(0.0, (deadline - datetime.now(UTC)).total_seconds()):.0f} s left"
        return f"waiting for approval {view.approval.approval_id} ({view.reason or 'the policy asks'}{left})"
    return f"{view.state.value}: {view.execution_id}"


def _execution_answer(
    view: ExecutionView, tokens: int | None, *, content_only: bool = False, own_program: bool = False
) -> ToolAnswer:
    """A finished execution as a result: the run's outcome, or why it never ran. ``own_program``: the program is
    the tool's own (the file writer, git apply), so its non-zero exit is the tool failing (``content_only``
    implies it: cat)."""
    result = view.result
    if result is None:
        error = view.error or ErrorBody(code="EXECUTION.CANCELLED", message="the run ended before its sandbox ran")
        never_ran = {"execution_id": view.execution_id, "error": error.model_dump(mode="json", exclude_none=True)}
        return ToolAnswer(f"refused: {error.code}: {error.message}", never_ran, True)
    stdout, out_cut = _cap(result.stdout, tokens)
    stderr, err_cut = _cap(result.stderr, tokens)
    structured: dict[str, Any] = {
        "execution_id": view.execution_id,
        "exit_code": result.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": result.truncated or out_cut or err_cut,
        "timed_out": result.timed_out,
        "oom_killed": result.oom_killed,
        "duration_ms": result.duration_ms,
        "side_effects": result.side_effects,
    }
    failure = result.error or view.error
    if failure is not None:
        structured["error"] = failure.model_dump(mode="json", exclude_none=True)
    failed = failure is not None or result.exit_code != 0
    if content_only and not failed:
        return ToolAnswer(stdout, structured, False)
    lines = [f"exit code {result.exit_code}" + (f" ({failure.code}: {failure.message})" if failure else "")]
    if stdout:
        lines.append(f"stdout:\n{stdout}")
    if stderr:
        lines.append(f"stderr:\n{stderr}")
    if result.side_effects:
        effects = result.side_effects
        lines.append(
            "workspace: "
            + ", ".join(f"{effects.get(k, 0)} {k}" for k in ("created", "modified", "deleted"))
            + f", {effects.get('bytes_written', 0)} bytes written"
        )
    # a command's own non-zero exit is an answer the model reads; a limit or a refusal is an error, and so is a
    # file tool that did not do what it was asked (a missing file, a patch that does not apply)
    tool_failed = (content_only or own_program) and failed
    return ToolAnswer("\n".join(lines), structured, failure is not None or tool_failed)


async def _execute(
    ctx: CallContext, raw: dict[str, Any], tokens: int | None, *, content_only: bool = False, own_program: bool = False
) -> ToolAnswer:
    try:
        view = await _until_final(ctx, raw)
    except OrchestratorError as err:
        return refusal(err)
    return _execution_answer(view, tokens, content_only=content_only, own_program=own_program)


# -- the tools ---------------------------------------------------------------------------------------------
async def run(ctx: CallContext, args: RunInput) -> ToolAnswer:
    raw = _governed(args, ctx, "run")
    if args.argv is not None:
        raw.update(tool="shell_exec", argv=args.argv)
    else:
        raw.update(tool="shell_command", command=args.command)
    if args.workdir is not None:
        raw["cwd"] = args.workdir
    if args.timeout_ms is not None:
        raw["timeout_ms"] = args.timeout_ms
    return await _execute(ctx, raw, args.max_output_tokens)


async def read_file(ctx: CallContext, args: ReadFileInput) -> ToolAnswer:
    raw = {**_governed(args, ctx, "read_file"), "tool": "shell_exec", "argv": ["cat", "--", args.path]}
    return await _execute(ctx, raw, args.max_output_tokens, content_only=True)


async def write_file(ctx: CallContext, args: WriteFileInput) -> ToolAnswer:
    raw = {**_governed(args, ctx, "write_file"), "tool": "file_write", "path": args.path, "content": args.content}
    return await _execute(ctx, raw, None, own_program=True)


async def apply_patch(ctx: CallContext, args: ApplyPatchInput) -> ToolAnswer:
    raw = {**_governed(args, ctx, "apply_patch"), "tool": "apply_patch", "patch": args.patch}
    return await _execute(ctx, raw, None, own_program=True)


async def _session_waits(ctx: CallContext) -> str:
    ask = None if ctx.call_id is None else await ctx.controller.pending_ask(ctx.call_id)
    if ask is None:
        return "the session is being decided and started (an ask waits for a person)"
    left = max(0.0, ask.deadline_unix - time.time())
    return f"waiting for approval {ask.approval_id} ({ask.policy_reason}, {left:.0f} s left)"


def _max_bytes(tokens: int | None) -> int:
    return DEFAULT_SESSION_OUTPUT_BYTES if tokens is None else min(tokens * BYTES_PER_TOKEN, MAX_SESSION_OUTPUT_BYTES)


def _session_answer(answer: SessionAnswer, wall_s: float) -> ToolAnswer:
    """In the shape the Codex tools answer: the state first, then the output."""
    structured = answer.model_dump(mode="json", exclude_none=True)
    if answer.running:
        head = f"Process running with session ID {answer.session_id}"
    else:
        head = f"Process exited with code {answer.exit_code}"
        if answer.closed_reason not in (None, "exit"):
            head += f" (session {answer.closed_reason})"
    lines = [f"Wall time: {wall_s:.3f} seconds", head]
    if answer.pending_bytes:
        lines.append(f"{answer.pending_bytes} more bytes of output wait for the next write_stdin")
    if answer.error is not None:
        lines.append(f"{answer.error.code}: {answer.error.message}")
    lines.append("Output:")
    lines.append(answer.stdout + answer.stderr)
    return ToolAnswer("\n".join(lines), structured, answer.error is not None)


async def exec_command(ctx: CallContext, args: ExecCommandInput) -> ToolAnswer:
    raw = {
        **_governed(args, ctx, "exec_command"),
        "cmd": args.cmd,
        "tty": args.tty,
        "yield_time_ms": args.yield_time_ms,
        "max_output_bytes": _max_bytes(args.max_output_tokens),
    }
    if args.workdir is not None:
        raw["cwd"] = args.workdir
    started = time.monotonic()
    opening = asyncio.ensure_future(ctx.controller.open_session(raw))
    try:
        # an ask keeps the open waiting: tell the caller it still waits (the session's execution decides it)
        while not opening.done():
            done, _ = await asyncio.wait({opening}, timeout=ASK_TICK_S)
            if not done:
                await ctx.progress(time.monotonic() - started, None, await _session_waits(ctx))
    except BaseException:
        # cancelled, or telling the caller how it waits failed: the service stops what it started (a session
        # nobody would learn the id of) and records the cancellation: waited for, shielded
        await stop(opening)
        raise
    try:
        answer = opening.result()
    except OrchestratorError as err:
        return refusal(err)
    return _session_answer(answer, time.monotonic() - started)


async def write_stdin(ctx: CallContext, args: WriteStdinInput) -> ToolAnswer:
    started = time.monotonic()
    try:
        answer = await ctx.controller.write_stdin(
            args.session_id,
            args.chars,
            yield_ms=args.yield_time_ms,
            max_bytes=_max_bytes(args.max_output_tokens),
            context=_context(ctx, "write_stdin"),
        )
    except OrchestratorError as err:
        return refusal(err)
    return _session_answer(answer, time.monotonic() - started)


Handler = Callable[[CallContext, Any], Awaitable[ToolAnswer]]
HANDLERS: dict[type[_Input], Handler] = {
    RunInput: run,
    ExecCommandInput: exec_command,
    WriteStdinInput: write_stdin,
    ReadFileInput: read_file,
    WriteFileInput: write_file,
    ApplyPatchInput: apply_patch,
}
