"""Reduce a request to its smallest auditable form. The only place that reads secret values,
and it reads them only to size and hash them."""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from collections.abc import Callable, Sequence

from orchestrator.domain.requests import (
    MAX_ARG_BYTES,
    ApplyPatchRequest,
    ExecCommandRequest,
    FileWriteRequest,
    Request,
    ShellCommandRequest,
    ShellExecRequest,
    ShellRequest,
    SkillExecRequest,
    WriteStdinRequest,
)
from orchestrator.domain.sanitized import (
    ContentDigest,
    KeyedDigest,
    RequestContext,
    RiskLevel,
    SanitizedPermissions,
    SanitizedRequest,
    ScriptDigest,
)
from orchestrator.gate.intent import ScriptSource, ShellAnalysis, analyze_argv, analyze_shell
from orchestrator.gate.patch_paths import patch_paths
from orchestrator.gate.paths import assess_paths, credential_reason, escapes_workspace
from orchestrator.gate.risk import Finding, assess_command, assess_env, combine


def digest(text: str) -> ContentDigest:
    data = text.encode("utf-8", "surrogatepass")
    return ContentDigest(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def keyed_digest(text: str, key: bytes) -> KeyedDigest:
    """An HMAC-SHA256 under ``key`` (held beside the evidence, never in it): whoever holds the key can check
    an input against its record; a reader of the records cannot guess a short one."""
    data = text.encode("utf-8", "surrogatepass")
    return KeyedDigest(bytes=len(data), hmac_sha256=hmac.new(key, data, hashlib.sha256).hexdigest())


#: the longest script the gate reads: as much as a shell string (``bash -c``) may hold; a longer one is
#: content it cannot analyze (never allowed without an approval or a rule)
MAX_ANALYZED_SCRIPT_BYTES = MAX_ARG_BYTES
NOT_SANITIZED = "its content is not in the sanitized request"


def script_source(path: str, data: bytes) -> ScriptSource:
    """A script's content as the gate reads it: UTF-8 text without NUL bytes, at most
    MAX_ANALYZED_SCRIPT_BYTES; else None, and why."""
    if len(data) > MAX_ANALYZED_SCRIPT_BYTES:
        return ScriptSource(
            path, None, f"it is {len(data)} bytes, more than the gate reads ({MAX_ANALYZED_SCRIPT_BYTES})"
        )
    if b"\x00" in data:
        return ScriptSource(path, None, "it holds NUL bytes (binary)")
    try:
        return ScriptSource(path, data.decode("utf-8"))
    except UnicodeDecodeError:
        return ScriptSource(path, None, "it is not UTF-8 text")


def analysis_of(request: Request) -> ShellAnalysis | None:
    """The shell analysis of an exec request; None for tools that run no command."""
    if isinstance(request, ShellExecRequest) and request.script is not None:
        return analyze_argv(request.argv, script_source(request.script.path, request.script.content))
    if isinstance(request, (ShellExecRequest, SkillExecRequest)):
        return analyze_argv(request.argv)
    if isinstance(request, ShellRequest):
        return analyze_argv(request.command)
    if isinstance(request, ShellCommandRequest):
        return analyze_shell(request.command)
    if isinstance(request, ExecCommandRequest):
        return analyze_shell(request.cmd)
    return None


def _command_key(request: Request) -> tuple[str, str | tuple[str, ...]] | None:
    """What a command's analysis (and so its findings, without an environment) is a function of."""
    if isinstance(request, ShellExecRequest) and request.script is not None:
        return None  # and of a script's content: not kept
    if isinstance(request, (ShellExecRequest, SkillExecRequest)):
        return ("argv", tuple(request.argv))
    if isinstance(request, ShellRequest):
        return ("argv", tuple(request.command))
    command = request.command if isinstance(request, ShellCommandRequest) else getattr(request, "cmd", None)
    if isinstance(command, str) and len(command) <= _CACHED_COMMAND_CHARS:
        return ("shell", command)
    return None


_CACHED_COMMAND_CHARS = 4096


@functools.lru_cache(maxsize=2048)
def _findings_of(key: tuple[str, str | tuple[str, ...]]) -> tuple[Finding, ...]:
    kind, command = key
    analysis = analyze_argv(command) if kind == "argv" else analyze_shell(str(command))
    return tuple(assess_command(analysis, env={}))


def sanitize(
    request: Request,
    *,
    workspace: str | os.PathLike[str] | None = None,
    input_key: Callable[[], bytes] | None = None,
    profile_egress: Sequence[str] = (),
) -> tuple[SanitizedRequest, ShellAnalysis | None]:
    """The sanitized request and, for exec tools, the full shell analysis the policy needs.
    ``input_key``: the key of write_stdin's and a script's digests (keyed_digest); without one, a plain sha256.
    ``profile_egress``: the canonical egress patterns of the profile the request runs with."""
    analysis = analysis_of(request)
    findings: list[Finding] = []
    if analysis is not None:
        key = _command_key(request)
        # the findings of a command without an environment depend on its text alone: the same command
        # asked again (an agent's loop) is assessed once
        cached = _findings_of(key) if key is not None and not request.env else None
        findings.extend(cached if cached is not None else assess_command(analysis, env=request.env))
        findings.extend(assess_env(request.env))

    fields: dict[str, object] = {}
    if isinstance(request, (ShellExecRequest, SkillExecRequest)):
        fields["argv"] = list(request.argv)
        if isinstance(request, SkillExecRequest):
            fields["skill"] = request.skill
        elif request.script is not None:
            data = request.script.content
            fields["script"] = (
                ScriptDigest(path=request.script.path, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                if input_key is None
                else ScriptDigest(
                    path=request.script.path,
                    bytes=len(data),
                    hmac_sha256=hmac.new(input_key(), data, hashlib.sha256).hexdigest(),
                )
            )
            # it is written where the sandbox reads it: in the workspace (the run refuses any other place, so
            # an absolute path inside the sandbox's mount is no escape), where a credential path is one still
            credential = credential_reason(request.script.path)
            if credential is not None:
                findings.append(Finding(RiskLevel.HIGH, f"{credential}: {request.script.path}"))
    elif isinstance(request, ShellRequest):
        fields["argv"] = list(request.command)
    elif isinstance(request, ShellCommandRequest):
        fields["command"] = request.command
    elif isinstance(request, ExecCommandRequest):
        fields["command"] = request.cmd
    elif isinstance(request, WriteStdinRequest):
        fields["target_session_id"] = request.session_id
        fields["stdin"] = digest(request.chars) if input_key is None else keyed_digest(request.chars, input_key())
    elif isinstance(request, FileWriteRequest):
        fields["path"] = request.path
        fields["content"] = digest(request.content)
        findings.extend(assess_paths([request.path], workspace=workspace, cwd=request.cwd))
    elif isinstance(request, ApplyPatchRequest):
        paths = patch_paths(request.patch)
        fields["patch"] = digest(request.patch)
        fields["patch_paths"] = paths
        findings.extend(assess_paths(paths, workspace=workspace, cwd=request.cwd))

    if request.cwd is not None:
        leaves = escapes_workspace(request.cwd, workspace=workspace)
        if leaves is not None:
            findings.append(Finding(RiskLevel.HIGH, f"cwd {leaves}"))
    perms = request.sandbox_permissions
    # what the sandbox of an exec tool may reach: the profile's hosts and the request's (the host set asked)
    egress = sorted({*profile_egress, *perms.egress_hosts}) if analysis is not None else []
    if egress:
        fields["egress"] = egress
    sanitized = SanitizedRequest(
        tool=request.tool,
        cwd=request.cwd,
        env_keys=sorted(request.env),
        timeout_ms=request.timeout_ms,
        tty=request.tty,
        profile=request.profile,
        image=request.image,
        sandbox_permissions=SanitizedPermissions(
            network=perms.network if isinstance(perms.network, bool) else list(perms.network),
            writable_root=perms.writable_root,
            extra_mounts=[f"{m.source}->{m.target}:{'ro' if m.read_only else 'rw'}" for m in perms.extra_mounts],
        ),
        intent=analysis.to_intent() if analysis is not None else None,
        risk=combine(findings),
        context=RequestContext(
            tenant=request.tenant,
            subject=request.subject,
            call_id=request.call_id,
            session_id=request.session_id if not isinstance(request, WriteStdinRequest) else None,
            retry_of=request.retry_of,
            ci=request.ci.recorded() if request.ci is not None else None,
            mcp=request.mcp,
        ),
        **fields,
    )
    return sanitized, analysis


def analysis_of_sanitized(sanitized: SanitizedRequest) -> ShellAnalysis | None:
    """Recompute the analysis from the sanitized form alone (it keeps argv/command verbatim; a script's content
    it does not keep: that script is unseen here, and its commands are not among the analysis')."""
    if sanitized.argv is not None and sanitized.script is not None:
        return analyze_argv(sanitized.argv, ScriptSource(sanitized.script.path, None, NOT_SANITIZED))
    if sanitized.argv is not None:
        return analyze_argv(sanitized.argv)
    if sanitized.command is not None:
        return analyze_shell(sanitized.command)
    return None
