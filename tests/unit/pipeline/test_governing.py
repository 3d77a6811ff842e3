"""What governs later runs is refused within a sandbox's reach: the config and everything it pulls in,
however the path to it is spelled (links, directories on the way, hard links), at build time, at run
time, and for a policy reloaded after an earlier sandbox's workspace came to hold it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import orchestrator
from orchestrator.domain.errors import ConfigInvalid, InputInvalid
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline import governing
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.governing import (
    Governing,
    approval_queue,
    check_workspace,
    governing_paths,
    package_and_python,
    policy_file,
    resolve,
)
from orchestrator.pipeline.this_process import THIS_PROCESS
from orchestrator.profiles import ProfileRegistry

POLICY = "safety: {mode: allow, denylist: [], rules: []}\n"


@pytest.fixture(autouse=True)
def no_earlier_workspaces() -> Iterator[None]:
    """This process's record of mounted workspaces, emptied for each test and restored after it."""
    with THIS_PROCESS.isolated():
        yield


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def refusal(config: Path, ws: Path, tmp_path: Path, **kwargs: object) -> InputInvalid:
    with pytest.raises(InputInvalid) as err:
        build_orchestrator(config, workspace=ws, evidence_path=tmp_path / "evidence.jsonl", **kwargs)  # type: ignore[arg-type]
    return err.value


def test_resolve_records_every_link_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "a").symlink_to("real")
    (tmp_path / "real" / "b").symlink_to(tmp_path / "real")
    where = resolve(tmp_path / "a" / "b" / "missing" / ".." / "file")
    assert where.links == (str(tmp_path / "a"), str(tmp_path / "real" / "b"))
    assert where.real == str(tmp_path / "real" / "file")


def test_a_config_in_the_workspace_is_refused_before_it_is_read(ws: Path, tmp_path: Path) -> None:
    config = ws / "policy.yaml"
    config.write_text("safety: {mode: [not valid\n")  # never read: the layout is refused first
    err = refusal(config, ws, tmp_path)
    assert err.code == "INPUT.INVALID"
    assert f"the policy file (--config) {config} is within a sandbox's reach: it lies in the workspace" in err.message
    assert err.details["file"] == str(config)


def test_a_directory_on_the_way_to_the_config_in_the_workspace_is_refused(ws: Path, tmp_path: Path) -> None:
    (ws / "conf" / "sub").mkdir(parents=True)
    config = ws / "conf" / "sub" / "policy.yaml"
    config.write_text(POLICY)
    assert "it lies in the workspace" in refusal(config, ws, tmp_path).message


def test_a_link_in_the_workspace_on_the_way_to_the_config_is_refused(ws: Path, tmp_path: Path) -> None:
    """The config itself is outside, but the sandbox could point the link elsewhere."""
    outside = tmp_path / "etc-so"
    outside.mkdir()
    (outside / "policy.yaml").write_text(POLICY)
    (ws / "conf").symlink_to(outside)
    err = refusal(ws / "conf" / "policy.yaml", ws, tmp_path)
    assert f"goes through the symbolic link {ws / 'conf'}, which lies in the workspace" in err.message


def test_a_link_outside_pointing_into_the_workspace_is_refused(ws: Path, tmp_path: Path) -> None:
    (ws / "policy.yaml").write_text(POLICY)
    link = tmp_path / "policy.yaml"
    link.symlink_to(ws / "policy.yaml")
    err = refusal(link, ws, tmp_path)
    assert f"it lies in the workspace {ws} (resolved: {ws / 'policy.yaml'})" in err.message


def test_a_hard_link_a_non_root_user_can_write_is_refused(ws: Path, tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY)
    os.link(config, tmp_path / "another-name.yaml")
    os.chown(config, 1000, 1000)
    assert "has 2 hard links" in refusal(config, ws, tmp_path).message
    os.chown(config, 0, 0)
    os.chmod(config, 0o644)  # only root can write it, under any name: fine
    build_orchestrator(config, workspace=ws, evidence_path=tmp_path / "evidence.jsonl")


def test_every_file_the_config_pulls_in_is_checked(ws: Path, tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY + f"approvals: {{provider: queue, queue_path: {ws / 'q' / 'approvals.db'}}}\n")
    assert "the approval queue (approvals.queue_path)" in refusal(config, ws, tmp_path).message
    config.write_text(POLICY + f"evidence: {{path: {ws / 'evidence.jsonl'}}}\n")
    with pytest.raises(InputInvalid, match="the evidence file"):
        build_orchestrator(config, workspace=ws)


@pytest.mark.parametrize("provider", ["queue", "auto", "rules", "none"])
def test_every_queue_an_answer_may_come_from_is_out_of_reach(ws: Path, tmp_path: Path, provider: str) -> None:
    """A local run under a config protects that config's service store too, whatever its provider: a sandbox
    that wrote the store `sandboxctl serve` polls would answer its own asks (and the runs' queue likewise)."""
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY + f"approvals: {{provider: {provider}}}\nservice: {{store: {ws / 'service.db'}}}\n")
    err = refusal(config, ws, tmp_path)
    assert err.message.startswith(
        f"the workspace {ws} cannot be used: the service's store (service.store) {ws / 'service.db'} is within a"
        f" sandbox's reach: it lies in the workspace {ws}"
    ), err.message
    assert err.message.endswith("; keep the service's store outside the workspace")
    config.write_text(POLICY + f"approvals: {{provider: {provider}, queue_path: {ws / 'q.db'}}}\n")
    assert "the approval queue (approvals.queue_path)" in refusal(config, ws, tmp_path).message
    config.write_text(POLICY + "service: {store: ws/service.db}\n")  # relative: from the config's directory
    assert f"the service's store (service.store) {ws / 'service.db'}" in refusal(config, ws, tmp_path).message


def test_a_profiles_directory_in_the_workspace_or_around_it_is_refused(ws: Path, tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY)
    (ws / "profiles").mkdir()
    err = refusal(config, ws, tmp_path, profiles=ProfileRegistry([ws / "profiles"]))
    assert f"the profiles directory {ws / 'profiles'} is within a sandbox's reach" in err.message
    # a workspace inside a profiles directory could add files to it (or be its seccomp/)
    err = refusal(config, ws, tmp_path, profiles=ProfileRegistry([tmp_path]))
    assert f"the workspace {ws} lies inside it" in err.message


def test_the_orchestrators_code_and_python_are_never_in_a_workspace(tmp_path: Path) -> None:
    package = Path(orchestrator.__file__).parent
    with pytest.raises(InputInvalid, match="the orchestrator's code"):
        check_workspace(package.parent, governing=package_and_python())
    with pytest.raises(InputInvalid, match="the orchestrator's code"):
        check_workspace(package / "gate", governing=package_and_python())
    check_workspace(tmp_path, governing=package_and_python())


def test_a_sibling_layout_is_fine_and_checked_again_at_run_time(ws: Path, tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY + f"approvals: {{provider: queue, queue_path: {tmp_path / 'approvals.db'}}}\n")
    orch = build_orchestrator(config, workspace=ws, evidence_path=tmp_path / "evidence.jsonl")
    assert [g.what for g in orch.governing] == [
        "the policy file (--config)",
        "the service's store (service.store)",
        "the approval queue (approvals.queue_path)",
    ]
    # what run() checks for the workspace it is given (it may differ from the one built with)
    checked = orch.governing_paths()
    named = [g.what for g in checked]
    evidence = "the evidence file (--evidence, SANDBOX_EVIDENCE_PATH)"
    assert {evidence, "the policy file (--config)", "the orchestrator's code"} <= set(named)
    with pytest.raises(InputInvalid, match=rf"the evidence file \(.*\) {tmp_path / 'evidence.jsonl'} is within"):
        check_workspace(tmp_path, governing=checked)


def test_a_file_moved_into_an_earlier_workspace_is_refused_as_config_invalid(ws: Path, tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    with THIS_PROCESS.running("ex-earlier", earlier):  # a sandbox of this process had it
        pass
    config = earlier / "policy.yaml"
    config.write_text(POLICY)
    with pytest.raises(ConfigInvalid) as err:
        check_workspace(ws, governing=[policy_file(config)])
    assert f"it lies in the workspace {earlier}" in err.value.message
    assert "an earlier sandbox of this process" in err.value.message


async def test_a_reloaded_policy_within_an_earlier_workspaces_reach_decides_nothing(tmp_path: Path) -> None:
    """Hot reload: the policy file's path came to lead into a workspace a sandbox of this process had
    (a link moved by someone): the next request is refused, recorded with its code, before any policy
    decides it."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "policy.yaml").write_text(POLICY)
    link = tmp_path / "policy.yaml"
    link.symlink_to(conf / "policy.yaml")
    evidence = tmp_path / "evidence.jsonl"
    orch = build_orchestrator(link, evidence_path=evidence)
    await orch.authorize({"tool": "shell_exec", "argv": ["ls"]})
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    with THIS_PROCESS.running("ex-earlier", earlier):
        pass
    (earlier / "policy.yaml").write_text("safety: {mode: allow, allowlist: [rm]}\n")  # what a sandbox wrote
    link.unlink()
    link.symlink_to(earlier / "policy.yaml")
    with pytest.raises(ConfigInvalid) as err:
        await orch.authorize({"tool": "shell_exec", "argv": ["rm", "-rf", "x"]})
    await orch.aclose()
    assert "the policy file (--config)" in err.value.message and str(earlier) in err.value.message
    last = json.loads(evidence.read_text().splitlines()[-1])
    assert (last["event"], last["error_code"]) == ("run_failed", "CONFIG.INVALID")
    assert last["execution_id"] == err.value.details["execution_id"]


def test_governing_paths_names_what_it_holds(tmp_path: Path) -> None:
    items = governing_paths(
        evidence=tmp_path / "e.jsonl",
        profile_dirs=[tmp_path / "p"],
        extra=[policy_file(tmp_path / "c.yaml"), approval_queue(tmp_path / "a.db")],
    )
    names = [g.what for g in items if "state directory" not in g.what]
    assert names[:4] == [
        "the evidence file (--evidence, SANDBOX_EVIDENCE_PATH)",
        "the policy file (--config)",
        "the approval queue (approvals.queue_path)",
        "the profiles directory",
    ]
    assert "the orchestrator's code" in names
    assert items[0].what == "the orchestrator's own state directory (SANDBOX_STATE_DIR)"
    assert all(os.path.isabs(g.path) for g in items)
    assert Governing("x", "/a").tree is False


def test_policy_source_in_a_safe_place_still_reloads(tmp_path: Path, ws: Path) -> None:
    """The checks do not stop an operator's edit outside every workspace from taking effect."""
    config = tmp_path / "policy.yaml"
    config.write_text(POLICY)
    source = PolicySource(config)
    first = source.current().version_hash
    with THIS_PROCESS.running("ex-1", ws):
        pass
    config.write_text("safety: {mode: deny}\n")
    os.utime(config, ns=(1, 1))
    governing.check_out_of_earlier_workspaces([policy_file(config)])
    assert source.current().version_hash != first
