"""CI jobs on the Kubernetes backend, through their real front doors: the controller a real service whose backend
is the test cluster (pvc workspaces: each step's pod mounts the job's workspace as its sub-path of the workspace
claim, and the controller and the runner see the same storage), the pool on.

* A whole GitHub Actions job through the container hook: hook.js run by node exactly as the runner runs it
  (tests/support/github_runner.py); the job's workspace is the runner's work directory,
  ``<service.workspaces>/<tenant>/<name>`` on the claim. A step's files are the next step's (not a copy), a
  failing step's code is the step's, a container step runs another allowed image on the same workspace, and
  after cleanup_job no pod of the job is left (pre-started ones included), nor anything on the claim beyond the
  runner's own directory. A runner whose work directory is not the job's workspace is refused at prepare_job.
* A whole GitLab job through the custom executor driver (``sandboxctl ci gitlab …`` as gitlab-runner calls it,
  tests/ci/test_gitlab_driver.py's replay): the job's build directory made on the claim, stages in pods, a
  failing script's code in BUILD_EXIT_CODE_FILE, the directory and every pod gone after cleanup.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.backends._support.labels import LABEL_MANAGED_BY, MANAGED_BY
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline import externals
from tests.ci.conftest import CI_POLICY
from tests.ci.test_github_js_action import ACTION, JS_POLICY
from tests.ci.test_gitlab_driver import BUILD_FAILURE
from tests.ci.test_gitlab_driver import _runner as gitlab_runner
from tests.support.github_runner import Runner
from tests.support.images import SANDBOX_UID
from tests.support.kube import SandboxSpace
from tests.support.runner_externals import NODE_VERSION, runner_externals
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]

IMAGE = "sandbox-orchestrator/default:latest"
#: another image the caps allow, for the container step (the job's workspace mounted all the same)
STEP_IMAGE = "sandbox-orchestrator/minimal:latest"
TENANT = "team-a"
#: the test node has 2 CPUs: the ci profile's 2 would hold the node for one step; the caps narrow it (a
#: deployment sizes them for its nodes)
CAPS = {"max_cpus": 0.5, "max_memory": "512m"}


def ci_config(tmp_path: Path, space: SandboxSpace) -> Path:
    """The CI tier's policy with the Kubernetes backend: the service's workspaces on the claim (below its root)."""
    policy: dict[str, Any] = json.loads(json.dumps(CI_POLICY))
    policy["caps"] = {**policy["caps"], **CAPS}
    backend = {"kind": "kubernetes", "kubernetes": space.settings().model_dump(mode="json", exclude_none=True)}
    return write_config(
        tmp_path,
        **policy,
        backend=backend,
        service={"workspaces": str(space.root / "ci-workspaces")},
        # steps may claim pods pre-started for the job (pvc mode): none of them outlives the job either
        pool={"enabled": True, "per_key": 1, "ttl_s": 600},
    )


@pytest.fixture
async def k8s_ci_service(tmp_path: Path, sandbox_space: SandboxSpace) -> AsyncIterator[Harness]:
    h = await start_service(ci_config(tmp_path, sandbox_space))
    try:
        yield h
    finally:
        await h.stop()


def pods_of(space: SandboxSpace) -> list[dict[str, Any]]:
    listed = space.cluster.kubectl(
        "get", "pods", "-n", space.namespace, "-l", f"{LABEL_MANAGED_BY}={MANAGED_BY}", "-o", "json"
    )
    return list(json.loads(listed.stdout)["items"])


async def pods_gone(space: SandboxSpace, within_s: float = 60.0) -> list[dict[str, Any]]:
    """The sandbox pods still there once none is, or ``within_s`` passed: a pre-started pod of the job is
    deleted right after cleanup_job, one still being filled once its start ended."""
    deadline = time.monotonic() + within_s
    while (left := pods_of(space)) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    return left


def runner_of(h: Harness, space: SandboxSpace, name: str) -> Runner:
    """The runner's work directory where the runner pod's mount puts it (subPathExpr <tenant>/$(POD_NAME) of
    the claim: the kubelet makes it), as the sandbox's user leaves it."""
    work = space.root / "ci-workspaces" / TENANT / name
    work.mkdir(parents=True)
    return Runner(url=h.url, token=token_of("agent-a"), work=work, name=name)


async def test_a_whole_job_runs_each_step_in_a_pod_on_the_jobs_claim(
    k8s_ci_service: Harness, sandbox_space: SandboxSpace
) -> None:
    config = yaml.safe_load(k8s_ci_service.config.read_text())
    assert config["backend"]["kind"] == "kubernetes"
    runner = runner_of(k8s_ci_service, sandbox_space, "runner-k8s-1")
    on_claim = set(sandbox_space.root.rglob("*"))  # the claim: the runner's directory, its tenant's
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    assert prepared.response is not None and prepared.response["isAlpine"] is False
    job_id = prepared.response["state"]["job"]
    assert f"workspace {runner.name} at /__w" in prepared.stdout, prepared.stdout
    runner.own_work()

    first = await runner.invoke(
        runner.script_step('echo "hello from $PWD on $(hostname)"; echo built > out.txt; echo "home $HOME"')
    )
    assert first.exit_code == 0, first.stderr
    assert "hello from /__w/app/app on sandbox" in first.stdout, first.stdout  # a pod (hostname: sandbox)
    assert "home /__w/_temp/_github_home" in first.stdout, first.stdout
    written = runner.work / "app" / "app" / "out.txt"
    assert written.read_text() == "built\n"  # on the claim, as the runner sees it
    assert written.stat().st_uid == SANDBOX_UID

    second = await runner.invoke(runner.script_step("cat out.txt; echo again >> out.txt"))
    assert second.exit_code == 0 and second.stdout.endswith("built\n"), second

    failing = await runner.invoke(runner.script_step("echo before; exit 3"))
    assert failing.exit_code == 3 and "before" in failing.stdout, failing

    contained = await runner.invoke(runner.container_step(STEP_IMAGE, "cat", ["/__w/app/app/out.txt"]))
    assert contained.exit_code == 0 and contained.stdout.endswith("built\nagain\n"), contained

    agent = k8s_ci_service.client("agent-a")
    steps = (await agent.get_ci_job(job_id)).steps
    assert len(steps) == 4
    cleaned = await runner.invoke(runner.cleanup_job())
    assert cleaned.exit_code == 0, cleaned.stderr
    assert f"job {job_id} closed after 4 step(s)" in cleaned.stdout

    assert await pods_gone(sandbox_space) == []  # every step's pod deleted, and every pre-started one
    assert runner.work.is_dir()  # the runner's own work directory (its pod's mount): not the job's to remove
    assert set(sandbox_space.root.rglob("*")) - set(runner.work.rglob("*")) == on_claim
    evidence = Path(config["evidence"]["path"])
    assert verify(evidence).ok
    for execution_id in steps:
        records = list(iter_records(evidence, execution_id=execution_id))
        started = next(r for r in records if r.event == "execution_started")
        assert started.data is not None and started.data["ci"]["repository"] == "org/app", started.data
        pooled = started.data.get("pooled")  # a pod pre-started for the job: its start is on its pool id's records
        lifecycle = [*records, *(iter_records(evidence, execution_id=pooled["pool_id"]) if pooled else [])]
        scheduled = next(r for r in lifecycle if r.event == "container_scheduled")  # the API server's lifecycle
        assert scheduled.data is not None and scheduled.data["node"], scheduled
        assert "container_destroyed" in [r.event for r in records]


async def test_a_runner_whose_work_directory_is_not_the_jobs_workspace_is_refused(
    k8s_ci_service: Harness, sandbox_space: SandboxSpace
) -> None:
    """SANDBOX_WORKSPACE naming another directory than the runner's _work (a runner pod mounting another sub-path
    of the claim, or another volume): its steps would not find the runner's scripts, and the runner would not see
    GITHUB_ENV/GITHUB_OUTPUT. prepare_job refuses it (CI.UNSUPPORTED), and the workspace it would have used is
    not left on the claim, nor any pod."""
    runner = runner_of(k8s_ci_service, sandbox_space, "runner-k8s-2")
    runner.context["SANDBOX_WORKSPACE"] = "elsewhere-2"
    elsewhere = sandbox_space.root / "ci-workspaces" / TENANT / "elsewhere-2"
    refused = await runner.invoke(runner.prepare_job(IMAGE))
    assert refused.exit_code == 1 and refused.response is None, refused
    assert "CI.UNSUPPORTED" in refused.stderr and "is not the job's workspace" in refused.stderr, refused.stderr
    assert f"{TENANT}/elsewhere-2" in refused.stderr, refused.stderr
    assert not elsewhere.exists()
    assert await pods_gone(sandbox_space) == []
    agent = k8s_ci_service.client("agent-a")
    assert (await agent.list()).items == []  # nothing ran


async def test_a_whole_gitlab_job_runs_each_stage_in_a_pod_on_the_claim(
    k8s_ci_service: Harness, sandbox_space: SandboxSpace, tmp_path: Path
) -> None:
    runner = gitlab_runner(k8s_ci_service.url, tmp_path)
    assert (await runner.stage("config")).exit_code == 0
    prepared = await runner.stage("prepare")
    assert prepared.exit_code == 0, prepared.stderr
    job_id = runner.controller_job()
    workspace = sandbox_space.root / "ci-workspaces" / TENANT / job_id  # made by the job, on the claim
    assert workspace.is_dir() and workspace.stat().st_uid == SANDBOX_UID

    sources = await runner.run("get_sources", ["mkdir -p /__w/builds/org/app", "echo 'hi' > /__w/builds/org/app/a"])
    assert sources.exit_code == 0, sources
    assert (workspace / "builds" / "org" / "app" / "a").read_text() == "hi\n"
    built = await runner.run("build_script", ["cd /__w/builds/org/app", "echo on $(hostname): $(cat a)"])
    assert built.exit_code == 0 and "on sandbox: hi" in built.stdout, built
    failing = await runner.run("build_script", ["echo about to fail", "exit 4"])
    assert failing.exit_code == BUILD_FAILURE and "about to fail" in failing.stdout, failing
    assert (runner.tempdir / "build_exit_code").read_text().strip() == "4"

    cleaned = await runner.stage("cleanup")
    assert cleaned.exit_code == 0, cleaned.stderr
    assert not workspace.exists()  # the job made it: removed at close, from the claim
    assert await pods_gone(sandbox_space) == []


def arc_runner_pod(name: str, *, init: bool) -> dict[str, Any]:
    """docs/ci.md's runner pod (its gha-runner-scale-set values' template) as written, but for what a restricted
    namespace and this test need: our image in every container, the hardening Pod Security asks, the runner's
    user the steps' (1000, docs/ci.md: one user), and a runner that writes a file into its work directory."""
    guide = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    [values] = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", guide, flags=re.S) if "containerMode:" in b]
    spec = values["template"]["spec"]
    for container in [*spec["initContainers"], *spec["containers"]]:
        container.update(
            image=IMAGE,
            imagePullPolicy="Never",
            securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        )
    runner = spec["containers"][0]
    runner["command"] = ["sh", "-c", "cd /home/runner/_work && mkdir -p _temp && echo from-runner > _temp/probe"]
    # the runner image's externals (our image has none): an emptyDir filled first, where the docs' init container
    # copies them from
    spec["volumes"].append({"name": "shipped", "emptyDir": {}})
    shipped = {"name": "shipped", "mountPath": "/home/runner/externals"}
    fill = "mkdir -p /home/runner/externals/node20/bin && echo '#!node' > /home/runner/externals/node20/bin/node"
    image_part = {"name": "runner-image", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", fill]}
    image_part.update(securityContext=spec["initContainers"][0]["securityContext"], volumeMounts=[shipped])
    spec["initContainers"][0]["volumeMounts"].append(shipped)
    spec["initContainers"].insert(0, image_part)
    if not init:
        del spec["initContainers"]
    spec["restartPolicy"] = "Never"
    spec["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": SANDBOX_UID,
        "runAsGroup": SANDBOX_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def ended(space: SandboxSpace, name: str, within_s: float = 120.0) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = space.cluster.kubectl("get", "pod", "-n", space.namespace, name, "-o", "jsonpath={.status.phase}")
        if got.stdout in ("Succeeded", "Failed"):
            return got.stdout
        time.sleep(0.5)
    raise AssertionError(f"pod {name} did not end within {within_s} s")


def test_the_runner_pods_work_directory_on_the_claim_as_the_docs_make_it(sandbox_space: SandboxSpace) -> None:
    """The kubelet makes a missing subPathExpr directory as root: without docs/ci.md's init container the runner
    cannot write its work directory; with it, the directory is the runner's, on the claim where the controller
    sees it as <workspaces>/ci-runners/<pod name> (the chart's workspaces are the claim's root)."""
    space = sandbox_space
    tenant = space.root / "ci-runners"  # made once, as the runner's user (docs/ci.md)
    if not tenant.exists():
        tenant.mkdir(mode=0o711)
        os.chown(tenant, SANDBOX_UID, SANDBOX_UID)
    space.cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "ci-runner-token", "namespace": space.namespace},
            "stringData": {"token": "a controller token"},
        }
    )
    deadline = time.monotonic() + 30  # pods are refused until the namespace's default ServiceAccount exists
    while space.cluster.kubectl("get", "serviceaccount", "default", "-n", space.namespace, check=False).returncode:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.2)
    with_init, without = f"runner-{uuid.uuid4().hex[:8]}", f"runner-{uuid.uuid4().hex[:8]}"
    for name, init in ((with_init, True), (without, False)):
        space.cluster.apply(
            {**arc_runner_pod(name, init=init), "metadata": {"name": name, "namespace": space.namespace}}
        )
    try:
        assert ended(space, with_init) == "Succeeded"
        work = tenant / with_init
        assert (work / "_temp" / "probe").read_text() == "from-runner\n"
        assert (work.stat().st_uid, work.stat().st_gid) == (SANDBOX_UID, SANDBOX_UID)
        # the runner's externals beside its work directory, as the controller takes them (pipeline.externals)
        copied = externals.location(work)
        assert copied == tenant / ".ci-externals" / with_init
        assert (copied / "node20" / "bin" / "node").read_text() == "#!node\n"
        assert externals.check(work).source == str(copied)

        assert ended(space, without) == "Failed"
        logs = space.cluster.kubectl("logs", "-n", space.namespace, without, check=False)
        assert "Permission denied" in logs.stdout + logs.stderr, logs
        assert (tenant / without).stat().st_uid == 0  # the kubelet's
        assert not (tenant / without / "_temp").exists()
    finally:
        space.cluster.kubectl("delete", "pod", "-n", space.namespace, with_init, without, "--wait=false", check=False)


async def test_a_javascript_action_runs_in_a_pod_with_the_runners_externals_read_only(
    tmp_path: Path, sandbox_space: SandboxSpace
) -> None:
    """The runner's externals, copied by the deployment onto the claim beside the work directory
    (``<tenant>/.ci-externals/<name>``, docs/ci.md), are a read-only sub-path of it at /__e in the step's pod: the
    action runs on the runner's node, writes the workspace, cannot write /__e; the directory stays the runner's."""
    policy: dict[str, Any] = json.loads(json.dumps(JS_POLICY))
    policy["caps"] = {**policy["caps"], **CAPS}
    backend = {"kind": "kubernetes", "kubernetes": sandbox_space.settings().model_dump(mode="json", exclude_none=True)}
    config = write_config(
        tmp_path, **policy, backend=backend, service={"workspaces": str(sandbox_space.root / "ci-workspaces")}
    )
    h = await start_service(config)
    try:
        runner = runner_of(h, sandbox_space, "runner-k8s-js")
        kept = externals.location(runner.work)
        shutil.copytree(runner_externals(), kept, symlinks=True)
        runner.context["SANDBOX_EXTERNALS"] = "1"
        prepared = await runner.invoke(runner.prepare_job(IMAGE))
        assert prepared.exit_code == 0, prepared.stderr
        runner.own_work()
        payload, step_env, output = runner.js_action_step("actions/hello", "v1", ACTION, inputs={"greeting": "hi"})
        ran = await runner.invoke(payload, step_env=step_env)
        assert ran.exit_code == 0, ran
        wanted = f"node {NODE_VERSION} at /__e/node20/bin/node, in the workspace: yes; a write into /__e: EROFS"
        assert wanted in ran.stdout, ran.stdout
        assert (runner.work / "app" / "app" / "greeting.txt").read_text() == "hi from org/app\n"
        assert output.read_text() == "greeting=hi\n"
        assert not (kept / "node20" / "bin" / "planted").exists()
        assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
        assert (kept / "node20" / "bin" / "node").is_file()  # the runner's, like its work directory
        assert await pods_gone(sandbox_space) == []
    finally:
        await h.stop()
