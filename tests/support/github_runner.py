"""The GitHub Actions runner's side of the container-hook protocol, as ``actions/runner`` does it: one process of
the hook per command, run by node for a ``.js`` hook, the input JSON on its stdin, an empty response file made
before (``ContainerHookManager.cs``: ``IOUtil.CreateEmptyFile``), read and deleted after; the hook's output is
the job log, its exit code the step's result; on a step's timeout SIGINT, then SIGKILL.

Inputs are built the way the runner builds them (``HookInput.cs``; ``ContainerOperationProvider.cs`` mounts the
work directory at /__w, its _temp, _actions, _tool, _temp/_github_home at /github/home,
_temp/_github_workflow at /github/workflow, the externals at /__e and the engine's socket; HOME=/github/home).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.ci.github import hook as hook_module

HOOK = Path(hook_module.__file__).with_name("hook.js")
NODE = "/usr/bin/node"


@dataclass
class HookRun:
    exit_code: int
    stdout: str
    stderr: str
    response: dict[str, Any] | None


@dataclass
class Runner:
    """One runner: its work directory (on the controller's workspace storage), its name, its environment."""

    url: str
    token: str
    work: Path  # the runner's _work: <service workspaces>/<tenant>/<name>
    name: str
    externals: Path | None = None
    context: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] | None = None

    def env(self, step: dict[str, str] | None = None) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SANDBOX_URL": self.url,
            "SANDBOX_TOKEN": self.token,
            "RUNNER_NAME": self.name,
            "GITHUB_REPOSITORY": "org/app",
            "GITHUB_WORKFLOW": "build",
            "GITHUB_JOB": "test",
            "GITHUB_RUN_ID": "4242",
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_REF": "refs/heads/main",
            "GITHUB_EVENT_NAME": "push",
            "GITHUB_ACTOR": "octocat",
            **self.context,
            **(step or {}),
        }

    async def invoke(
        self,
        payload: dict[str, Any],
        *,
        step_env: dict[str, str] | None = None,
        timeout_s: float = 120.0,
        grace_s: float = 5.0,
    ) -> HookRun:
        """The hook run once, as the runner runs it (the payload's responseFile replaced by a fresh one)."""
        process, payload, response_file = await self.spawn(payload, step_env=step_env)
        communicate = asyncio.ensure_future(process.communicate(json.dumps(payload).encode() + b"\n"))
        try:
            out, err = await asyncio.wait_for(asyncio.shield(communicate), timeout_s)
        except TimeoutError:  # the runner's step timeout: SIGINT, then SIGKILL
            process.send_signal(signal.SIGINT)
            try:
                out, err = await asyncio.wait_for(asyncio.shield(communicate), grace_s)
            except TimeoutError:
                process.kill()
                out, err = await communicate
        text = response_file.read_text() if response_file.exists() else ""
        response_file.unlink(missing_ok=True)
        response = json.loads(text) if text.strip() else None
        if payload["command"] == "prepare_job" and response is not None:
            self.state = response.get("state")
        assert process.returncode is not None
        return HookRun(process.returncode, out.decode(), err.decode(), response)

    async def spawn(
        self, payload: dict[str, Any], *, step_env: dict[str, str] | None = None
    ) -> tuple[asyncio.subprocess.Process, dict[str, Any], Path]:
        """The hook started as the runner starts it (an empty response file made first), not waited for: the
        process, the input to write to its stdin (then close it, as the runner does), its response file."""
        responses = self.work / "_temp" / "_runner_hook_responses"
        responses.mkdir(parents=True, exist_ok=True)
        response_file = responses / f"{uuid.uuid4()}.json"
        response_file.write_text("")
        payload = {**payload, "responseFile": str(response_file)}
        if self.state is not None and payload["command"] != "prepare_job":
            payload["state"] = self.state
        process = await asyncio.create_subprocess_exec(
            NODE,
            str(HOOK),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env(step_env),
        )
        return process, payload, response_file

    def own_work(self, uid: int = 1000, gid: int = 1000) -> None:
        """The work directory as the sandbox's user's (the profiles' 1000), as a runner running as that user
        would leave it: steps write into it."""
        for root, dirs, files in os.walk(self.work):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)
        os.chown(self.work, uid, gid)

    # -- inputs as the runner builds them ----------------------------------------------------------------
    def system_mounts(self) -> list[dict[str, Any]]:
        work = str(self.work)
        mounts = [
            (work, "/__w", False),
            (str(self.externals or "/home/runner/externals"), "/__e", True),
            (f"{work}/_temp", "/__w/_temp", False),
            (f"{work}/_actions", "/__w/_actions", False),
            (f"{work}/_tool", "/__w/_tool", False),
            (f"{work}/_temp/_github_home", "/github/home", False),
            (f"{work}/_temp/_github_workflow", "/github/workflow", False),
            ("/var/run/docker.sock", "/var/run/docker.sock", False),
        ]
        return [{"sourceVolumePath": s, "targetVolumePath": t, "readOnly": ro} for s, t, ro in mounts]

    def prepare_job(self, image: str, **container: Any) -> dict[str, Any]:
        for sub in ("_temp/_github_home", "_temp/_github_workflow", "_actions", "_tool", "app/app"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        return {
            "command": "prepare_job",
            "responseFile": None,
            "state": {},
            "args": {
                "container": {
                    "image": image,
                    "dockerfile": None,
                    "entryPointArgs": [],
                    "entryPoint": None,
                    "workingDirectory": "/__w/app/app",
                    "createOptions": None,
                    "registry": None,
                    "environmentVariables": {"HOME": "/github/home"},
                    "portMappings": [],
                    "systemMountVolumes": self.system_mounts(),
                    "userMountVolumes": [],
                    **container,
                },
                "services": [],
            },
        }

    def script_step(
        self, script: str, *, env: dict[str, str] | None = None, prepend: list[str] | None = None
    ) -> dict[str, Any]:
        """A run: step: the runner writes the script into _temp and runs it with bash (its default shell)."""
        name = f"{uuid.uuid4()}.sh"
        path = self.work / "_temp" / name
        path.write_text(script)
        os.chown(path, 1000, 1000)
        return {
            "command": "run_script_step",
            "responseFile": None,
            "state": {},
            "args": {
                "entryPointArgs": ["--noprofile", "--norc", "-e", "-o", "pipefail", f"/__w/_temp/{name}"],
                "entryPoint": "bash",
                "environmentVariables": {"CI": "true", "GITHUB_ACTIONS": "true", **(env or {})},
                "prependPath": prepend or [],
                "workingDirectory": "/__w/app/app",
            },
        }

    def js_action_step(
        self, action: str, ref: str, source: str, *, inputs: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], dict[str, str], Path]:
        """A JavaScript action (``uses: <action>@<ref>``, ``runs.using: node20``) as the runner runs it: the action
        downloaded into _actions/<owner>/<repo>/<ref>, run with the runner's externals' node
        (``NodeScriptActionHandler.cs``: ``externals/node20/bin/node``, the script's path in double quotes, both
        translated to the job container's paths; ``ContainerHookManager.cs`` splits the argument string at
        spaces), its inputs as ``INPUT_<NAME>``, ``GITHUB_OUTPUT`` a file of _temp/_runner_file_commands. Returns
        the hook's input, the hook process's own variables for the step (``GITHUB_ACTION_REPOSITORY``/``_REF``) and
        the output file on the runner's side."""
        directory = self.work / "_actions" / action / ref
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "index.js").write_text(source)
        commands = self.work / "_temp" / "_runner_file_commands"
        commands.mkdir(parents=True, exist_ok=True)
        output = commands / f"set_output_{uuid.uuid4()}"
        output.write_text("")
        for path in (directory, directory / "index.js", commands, output):
            os.chown(path, 1000, 1000)
        env = {
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": "/__w/app/app",
            "GITHUB_REPOSITORY": "org/app",
            "GITHUB_OUTPUT": f"/__w/_temp/_runner_file_commands/{output.name}",
            **{f"INPUT_{name.replace(' ', '_').upper()}": value for name, value in (inputs or {}).items()},
        }
        payload = {
            "command": "run_script_step",
            "responseFile": None,
            "state": {},
            "args": {
                "entryPointArgs": f'"/__w/_actions/{action}/{ref}/index.js"'.split(" "),
                "entryPoint": "/__e/node20/bin/node",
                "environmentVariables": env,
                "prependPath": [],
                "workingDirectory": "/__w/app/app",
            },
        }
        step_env = {
            "GITHUB_ACTION": "__" + action.replace("/", "_"),
            "GITHUB_ACTION_REPOSITORY": action,
            "GITHUB_ACTION_REF": ref,
        }
        return payload, step_env, output

    def container_step(self, image: str, entry: str, args: list[str], **more: Any) -> dict[str, Any]:
        return {
            "command": "run_container_step",
            "responseFile": None,
            "state": {},
            "args": {
                "image": image,
                "dockerfile": None,
                "entryPointArgs": args,
                "entryPoint": entry,
                "workingDirectory": "/__w/app/app",
                "createOptions": None,
                "environmentVariables": {"HOME": "/github/home", "GITHUB_ACTIONS": "true"},
                "prependPath": [],
                "userMountVolumes": [],
                "systemMountVolumes": self.system_mounts(),
                "registry": None,
                "portMappings": [],
                **more,
            },
        }

    @staticmethod
    def cleanup_job() -> dict[str, Any]:
        return {"command": "cleanup_job", "responseFile": None, "state": {}, "args": {}}
