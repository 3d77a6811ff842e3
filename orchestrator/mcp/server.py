"""The SDK's low-level server over the tool table: ``tools/list`` from ``tools.TOOLS``, ``tools/call`` validated
against the same models (a malformed call is a protocol error, INVALID_PARAMS, naming the fields and never their
values), then run by ``calls``. Who the call is for comes from the transport: ``resolve`` maps a request's
context to the caller's controller (the token's principal on /mcp; the process's over stdio)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from orchestrator.domain.errors import ExecutionCancelled, OrchestratorError, SandboxUnavailable
from orchestrator.domain.mcp import McpContext, McpTransport
from orchestrator.mcp.calls import HANDLERS, CallContext, ToolAnswer, refusal, stop
from orchestrator.mcp.controller import Controller
from orchestrator.mcp.tools import BY_NAME, TOOLS

log = logging.getLogger(__name__)
SERVER_NAME = "sandbox-orchestrator"
INSTRUCTIONS = (
    "Every command runs in a fresh, contained sandbox (no network, read-only root, the workspace mounted) after "
    "a deterministic policy and, where it asks, a person said yes. Refusals come back as tool errors with a "
    "stable code (error.code) and what to do about them. Sessions (exec_command, write_stdin) keep a process "
    "running between calls."
)
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a call is for: the controller acting for them, the MCP session it came in, and (where the transport
    can tell) an event set once its client left."""

    controller: Controller
    session: str | None
    gone: asyncio.Event | None = None


#: (the request's context) -> its caller
Resolve = Callable[[ServerRequestContext[Any, Any]], Caller]


def _label(text: str) -> str:
    """What the client sent, as the evidence records it: printable ASCII (anything else, a control character or
    a lone surrogate, is a '?'), at most 256 characters. Sanitized, never refused: a call never fails on it."""
    return _PRINTABLE.sub("?", text[:256])


def _client_label(ctx: ServerRequestContext[Any, Any]) -> str | None:
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    if info is None:
        return None
    return _label(f"{info.name}/{info.version}") or None


def _fields(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}" for e in err.errors(include_input=False)
    )


EVIDENCE_TEMPLATE = "sandbox://executions/{execution_id}/evidence"
_EVIDENCE_URI = re.compile(r"^sandbox://executions/([A-Za-z0-9._-]{1,128})/evidence$")


def _call_id(session: str | None, request_id: object) -> str | None:
    """The call's id in the evidence: the JSON-RPC id is the connection's own, so the session (or, without one,
    a random word) tells it apart from another connection's call of the same id. The client chose the id:
    sanitized as a label is (a lone surrogate in it would have the request refused as INPUT.INVALID)."""
    if request_id is None:
        return None
    return _label(f"{session or 'mcp-' + uuid.uuid4().hex[:12]}:{request_id}")


async def _unless_gone(work: Awaitable[ToolAnswer], gone: asyncio.Event | None) -> ToolAnswer:
    """``work``'s answer; cancelled once the client left (a stateful HTTP session's call outlives its request's
    connection otherwise: the SDK cancels only on notifications/cancelled). Its cancellation is recorded."""
    if gone is None:
        return await work
    task = asyncio.ensure_future(work)
    left = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await stop(task)
        raise
    finally:
        left.cancel()
    if not task.done():
        await stop(task)
        raise ExecutionCancelled("the client left before the call ended")
    return task.result()


def build_server(transport: McpTransport, resolve: Resolve, *, version: str = "") -> Server[Any]:
    # the table is fixed: its schemas made once (pydantic builds one in about a millisecond). The 2026-07-28
    # Streamable HTTP entry checks a tools/call's Mcp-Param-* headers against its tool's schema before every
    # call: without get_tool_input_schema it runs the tools/list handler to find it, each call
    schemas: dict[str, dict[str, Any]] = {tool.name: tool.input_schema() for tool in TOOLS}
    listed = [
        types.Tool(
            name=tool.name,
            title=tool.title,
            description=tool.description,
            input_schema=schemas[tool.name],
            annotations=types.ToolAnnotations(
                title=tool.title,
                read_only_hint=tool.read_only,
                destructive_hint=not tool.read_only,
                idempotent_hint=tool.read_only,
                open_world_hint=False,
            ),
        )
        for tool in TOOLS
    ]

    def input_schema(name: str) -> dict[str, Any] | None:
        return schemas.get(name)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(listed))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = BY_NAME.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name[:64]!r}: tools/list names them")
        try:
            args = tool.model.model_validate(params.arguments or {})
        except ValidationError as err:
            raise MCPError(types.INVALID_PARAMS, f"{tool.name}: {_fields(err)}") from None
        caller = resolve(ctx)
        session = (_label(caller.session) or None) if caller.session is not None else None

        async def progress(done: float, total: float | None, message: str) -> None:
            try:
                await ctx.session.report_progress(done, total, message)
            except Exception:  # a courtesy: a client that cannot take it still gets its answer, its call goes on
                log.debug("MCP progress not delivered", exc_info=True)

        context = CallContext(
            controller=caller.controller,
            mcp=McpContext(transport=transport, session=session, client=_client_label(ctx)),
            call_id=_call_id(session, ctx.request_id),
            progress=progress,
        )
        try:
            answer = await _unless_gone(HANDLERS[tool.model](context, args), caller.gone)
        except OrchestratorError as err:  # the handlers answer refusals themselves; this is a last word
            answer = refusal(err)
        except Exception:  # never a traceback to the caller: logged here, a stable code there
            log.exception("MCP tool %s failed", tool.name)
            answer = refusal(SandboxUnavailable(f"the controller could not complete {tool.name} (see its log)"))
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)],
            structured_content=answer.structured,
            is_error=answer.is_error,
        )

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="evidence",
                    title="An execution's evidence",
                    uri_template=EVIDENCE_TEMPLATE,
                    description="The hash-chained evidence records of one of your executions (a tool result's "
                    "execution_id), oldest first: the decision, who approved, the sandbox's lifecycle, the end.",
                    mime_type="application/json",
                )
            ]
        )

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])  # one per execution: read through the template

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        found = _EVIDENCE_URI.fullmatch(uri)
        if found is None:
            raise MCPError(
                types.INVALID_PARAMS, f"no such resource: resources/templates/list names them ({uri[:80]!r})"
            )
        try:
            records = await resolve(ctx).controller.evidence(found.group(1))
        except OrchestratorError as err:  # another tenant's execution is one that does not exist
            raise MCPError(types.INVALID_PARAMS, f"{err.code}: {err.message}") from None
        text = json.dumps(records, separators=(",", ":"))
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
        )

    return Server(
        SERVER_NAME,
        version=version,
        title="Sandbox orchestrator",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resource_templates=list_templates,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
