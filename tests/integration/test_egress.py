"""Egress on the real engine: a sandbox whose profile (or approved request) allows hosts reaches exactly those,
through our proxy, and nothing else — no direct route, no DNS; each connection attempt is on the evidence;
network asks are approved per session; a run the sandbox held back says so, and its retry is asked about.

The far hosts are an HTTP and a TLS server in a network namespace this test run makes (tests/support/egress.py).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import NoApprovalProvider, SandboxUnavailable
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from tests.support.egress import FETCH, HTTP_PORT, PROBE, TLS_PORT, EgressNet, egress_net
from tests.support.evidence import record_dicts
from tests.support.orchestrators import docker_orchestrator

pytestmark = pytest.mark.integration


class CountingApprover:
    """Approves every ask for its session, and counts them."""

    name = "test-approver"

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        self.asked.append(request)
        return ApprovalResult(outcome=ApprovalOutcome.APPROVED_FOR_SESSION, approver=self.name, reason="test")


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressNet]:
    with egress_net(tmp_path_factory.mktemp("egress-net")) as made:
        yield made


def write_profiles(directory: Path) -> Path:
    directory.mkdir(exist_ok=True)
    web = ["web.test:8080", "tls.test:8443", "host.test:8080"]
    for name, allow in (("egress-web", web), ("egress-none", None)):
        profile: dict[str, Any] = {"description": "egress test", "extends": "workspace-write"}
        if allow:
            profile["network"] = {"mode": "allowlist", "allow": allow}
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(profile))
    untrusted = {"description": "gVisor with egress", "extends": "untrusted", "network": {"mode": "allowlist",
                 "allow": ["web.test:8080"]}}  # fmt: skip
    (directory / "egress-gvisor.yaml").write_text(yaml.safe_dump(untrusted))
    return directory


def config(tmp_path: Path, net: EgressNet, *, network_allow: list[str], pool: bool = False) -> Path:
    rules = [
        {"argv_prefix": "python3 fetch.py", "risk_at_most": "high", "action": "allow"},
        {"argv_prefix": "python3 probe.py", "risk_at_most": "high", "action": "allow"},
        {"argv_prefix": "sh -c", "risk_at_most": "high", "action": "allow"},
    ]
    data = {
        "safety": {"mode": "ask", "denylist": [], "rules": rules, "network_allow": network_allow},
        # host.test: pinned to the host's own end of the test's veth (the proxy never connects to its host)
        "egress": {"hosts": {**net.hosts, "host.test": net.host_ip}},
        "pool": {"enabled": pool, "per_key": 1, "ttl_s": 60},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def orchestrator(
    tmp_path: Path, net: EgressNet, *, network_allow: list[str], approvals: Any = None, pool: bool = False
) -> Orchestrator:
    return await docker_orchestrator(
        tmp_path,
        config(tmp_path, net, network_allow=network_allow, pool=pool),
        approvals=approvals,
        profile_dirs=[write_profiles(tmp_path / "profiles")],
    )


@pytest.fixture
def workspace(tmp_path: Path, net: EgressNet) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "fetch.py").write_text(FETCH)
    (ws / "probe.py").write_text(PROBE)
    (ws / "ca.pem").write_text(net.ca_pem)
    for path in (ws, *ws.iterdir()):
        os.chown(path, 1000, 1000)
    return ws


@pytest.fixture
async def orch(tmp_path: Path, net: EgressNet) -> AsyncIterator[Orchestrator]:
    o = await orchestrator(tmp_path, net, network_allow=["web.test:8080", "tls.test:8443", "host.test:8080"])
    yield o
    await o.aclose()
    assert verify(tmp_path / "evidence.jsonl").ok


def fetch(url: str, **extra: Any) -> dict[str, Any]:
    return {"tool": "shell_exec", "argv": ["python3", "fetch.py", url], "env": {}, **extra}


def answer(result: ExecutionResult) -> dict[str, Any]:
    out = result.to_json()
    return {**json.loads(out["stdout"] or "{}"), "exit_code": out["exit_code"], "run_error": out["error"]}


async def test_an_allowlisted_host_is_reached_through_the_proxy_and_recorded(
    orch: Orchestrator, tmp_path: Path, workspace: Path
) -> None:
    result = await orch.execute(
        fetch(f"http://web.test:{HTTP_PORT}/bytes/100000", profile="egress-web"), workspace=workspace
    )
    got = answer(result)
    assert got["ok"] and got["size"] == 100_000, got
    execution = str(result.authorization.execution_id)
    [connection] = record_dicts(tmp_path / "evidence.jsonl", execution, "egress_connection")
    data = connection["data"]
    assert (data["host"], data["port"], data["method"], data["allowed"]) == ("web.test", HTTP_PORT, "GET", True)
    assert data["matched"] == "web.test:8080" and data["address"].startswith("10.231.")
    assert data["bytes_down"] > 100_000 and data["bytes_up"] > 0 and data["duration_ms"] >= 0
    [summary] = record_dicts(tmp_path / "evidence.jsonl", execution, "egress_summary")
    assert summary["data"]["allowed"] == 1 and summary["data"]["refused"] == 0
    events = [r.event for r in iter_records(tmp_path / "evidence.jsonl", execution_id=execution)]
    assert events.index("egress_summary") < events.index("execution_finished")  # before the end record
    started = record_dicts(tmp_path / "evidence.jsonl", execution, "execution_started")[0]
    assert started["data"]["egress"] == ["host.test:8080", "tls.test:8443", "web.test:8080"]


async def test_tls_goes_through_a_tunnel_with_its_server_name(
    orch: Orchestrator, tmp_path: Path, workspace: Path
) -> None:
    result = await orch.execute(fetch(f"https://tls.test:{TLS_PORT}/hello", profile="egress-web"), workspace=workspace)
    got = answer(result)
    assert got["ok"] and got["body"].startswith(f"hello from {TLS_PORT}"), got
    connections = record_dicts(tmp_path / "evidence.jsonl", str(result.authorization.execution_id), "egress_connection")
    assert [(c["data"]["method"], c["data"]["sni"], c["data"]["allowed"]) for c in connections] == [
        ("CONNECT", "tls.test", True)
    ]
    assert connections[0]["data"]["bytes_up"] > 0 and connections[0]["data"]["bytes_down"] > 0


async def test_a_host_off_the_list_is_refused_recorded_and_the_run_is_restricted(
    orch: Orchestrator, tmp_path: Path, workspace: Path
) -> None:
    result = await orch.execute(
        fetch(f"http://other.test:{HTTP_PORT}/hello", profile="egress-web"), workspace=workspace
    )
    got = answer(result)
    assert not got["ok"] and "403" in got["error"], got
    error = result.to_json()["error"]
    assert error["code"] == "SANDBOX.RESTRICTED"
    assert error["details"]["escalation"] == {"sandbox_permissions": {"network": ["other.test:8080"]}}
    assert error["details"]["denied"] == [{"kind": "egress", "host": "other.test:8080", "source": "proxy"}]
    [refused] = record_dicts(tmp_path / "evidence.jsonl", str(result.authorization.execution_id), "egress_connection")
    assert refused["status"] == "refused" and refused["data"]["refusal"] == "not_allowed"
    assert refused["data"]["address"] is None  # never connected


async def test_the_proxy_never_connects_to_its_own_host(orch: Orchestrator, tmp_path: Path, workspace: Path) -> None:
    """host.test is allowlisted, but pinned to an address of the host itself: refused, never connected to."""
    result = await orch.execute(fetch(f"http://host.test:{HTTP_PORT}/hello", profile="egress-web"), workspace=workspace)
    assert not answer(result)["ok"]
    [refused] = record_dicts(tmp_path / "evidence.jsonl", str(result.authorization.execution_id), "egress_connection")
    assert (refused["data"]["refusal"], refused["data"]["address"]) == ("address", None)
    assert result.to_json()["error"] is None  # no approval could lift it: no escalation is offered


async def test_no_direct_route_and_no_dns_from_inside(orch: Orchestrator, net: EgressNet, workspace: Path) -> None:
    for argv in (["python3", "probe.py", net.far_ip, str(HTTP_PORT)], ["python3", "probe.py", net.host_ip, "22"]):
        result = await orch.execute({"tool": "shell_exec", "argv": argv, "profile": "egress-web"}, workspace=workspace)
        got = answer(result)
        assert got["direct"] in ("ENETUNREACH", "EHOSTUNREACH"), got
        assert got["dns"] == "gaierror", got


async def test_a_profile_reaching_more_than_the_policy_allows_is_asked_about(
    tmp_path: Path, net: EgressNet, workspace: Path
) -> None:
    o = await orchestrator(tmp_path, net, network_allow=["web.test:8080", "host.test:8080"])  # not tls.test:8443
    try:
        with pytest.raises(NoApprovalProvider) as asked:
            await o.execute(fetch(f"http://web.test:{HTTP_PORT}/hello", profile="egress-web"), workspace=workspace)
        assert "network: tls.test:8443" in asked.value.message
    finally:
        await o.aclose()


async def test_network_asked_and_approved_for_one_session_only(tmp_path: Path, net: EgressNet, workspace: Path) -> None:
    approver = CountingApprover()
    o = await orchestrator(tmp_path, net, network_allow=[], approvals=approver)
    hosts = {"sandbox_permissions": {"network": ["web.test:8080"]}, "profile": "egress-none"}
    try:
        first = await o.execute(
            fetch(f"http://web.test:{HTTP_PORT}/hello", session_id="s1", **hosts), workspace=workspace
        )
        assert answer(first)["ok"] and len(approver.asked) == 1
        assert "network: web.test:8080" in approver.asked[0].policy_reason
        # the same session: another command to the same host is not asked about again (the policy allows it)
        again = await o.execute(
            fetch(f"http://web.test:{HTTP_PORT}/bytes/10", session_id="s1", **hosts), workspace=workspace
        )
        assert answer(again)["ok"] and len(approver.asked) == 1
        assert again.authorization.approved_by == "policy"
        # another session is asked again; and a host never approved is asked about even in s1
        other = await o.execute(
            fetch(f"http://web.test:{HTTP_PORT}/hello", session_id="s2", **hosts), workspace=workspace
        )
        assert answer(other)["ok"] and len(approver.asked) == 2
        more = {"sandbox_permissions": {"network": ["web.test:8080", "tls.test:8443"]}, "profile": "egress-none"}
        await o.execute(fetch(f"http://web.test:{HTTP_PORT}/hello", session_id="s1", **more), workspace=workspace)
        assert len(approver.asked) == 3 and "network: tls.test:8443" in approver.asked[2].policy_reason
        assert "web.test" not in approver.asked[2].policy_reason.split("network:")[1]
    finally:
        await o.aclose()


async def test_a_restricted_run_is_retried_with_its_escalation_asked_and_linked(
    tmp_path: Path, net: EgressNet, workspace: Path
) -> None:
    approver = CountingApprover()
    o = await orchestrator(tmp_path, net, network_allow=[], approvals=approver)
    write = {"tool": "shell_exec", "argv": ["sh", "-c", "echo kept > /home/sandbox/note && cat /home/sandbox/note"]}
    try:
        failed = await o.execute(write, workspace=workspace)
        error = failed.to_json()["error"]
        assert error["code"] == "SANDBOX.RESTRICTED", failed.to_json()
        assert error["details"]["escalation"] == {"sandbox_permissions": {"writable_root": True}}
        assert error["details"]["denied"] == [{"kind": "read_only_root", "source": "output"}]
        assert len(approver.asked) == 1 and "writable_root" not in approver.asked[0].policy_reason
        retry = {**write, "retry_of": error["details"]["retry_of"], **error["details"]["escalation"]}
        second = await o.execute(retry, workspace=workspace)
        assert second.to_json()["stdout"] == "kept\n" and second.ok
        assert len(approver.asked) == 2 and "writable_root" in approver.asked[1].policy_reason  # asked, never automatic
        [received] = record_dicts(
            tmp_path / "evidence.jsonl", str(second.authorization.execution_id), "request_received"
        )
        assert received["data"]["retry_of"] == {
            "execution_id": str(failed.authorization.execution_id),
            "known": True,
            "denied": [{"kind": "read_only_root", "source": "output"}],
        }
        # an egress refusal, retried with the host it needed
        elsewhere = {"profile": "egress-none", "sandbox_permissions": {"network": ["tls.test:8443"]}}
        refused = await o.execute(fetch(f"http://web.test:{HTTP_PORT}/hello", **elsewhere), workspace=workspace)
        details = refused.to_json()["error"]["details"]
        assert details["escalation"] == {"sandbox_permissions": {"network": ["web.test:8080"]}}
        again = fetch(f"http://web.test:{HTTP_PORT}/hello", profile="egress-none", retry_of=details["retry_of"],
                      **details["escalation"])  # fmt: skip
        assert answer(await o.execute(again, workspace=workspace))["ok"]
        assert "network: web.test:8080" in approver.asked[-1].policy_reason
    finally:
        await o.aclose()


async def test_a_pooled_sandbox_has_its_egress_too(tmp_path: Path, net: EgressNet, workspace: Path) -> None:
    o = await orchestrator(tmp_path, net, network_allow=["web.test:8080", "tls.test:8443", "host.test:8080"], pool=True)
    try:
        request = fetch(f"http://web.test:{HTTP_PORT}/hello", profile="egress-web")
        assert o.prestart(request, workspace=workspace)
        assert o.pool is not None
        for _ in range(200):
            if o.pool.describe()["ready"]:
                break
            await asyncio.sleep(0.05)
        results = [await o.execute(request, workspace=workspace) for _ in range(2)]
        assert all(answer(r)["ok"] for r in results)
        first = record_dicts(
            tmp_path / "evidence.jsonl", str(results[0].authorization.execution_id), "execution_started"
        )[0]
        assert "pooled" in first["data"]
        for result in results:
            [connection] = record_dicts(
                tmp_path / "evidence.jsonl", str(result.authorization.execution_id), "egress_connection"
            )
            assert connection["data"]["allowed"]
    finally:
        await o.aclose()


async def test_what_cannot_have_the_proxy_as_its_route_is_unavailable(
    orch: Orchestrator, tmp_path: Path, net: EgressNet, workspace: Path
) -> None:
    with pytest.raises(SandboxUnavailable, match="gVisor"):
        await orch.execute(fetch(f"http://web.test:{HTTP_PORT}/hello", profile="egress-gvisor"), workspace=workspace)
    # unrestricted network, even approved, is never given
    (tmp_path / "open").mkdir()
    approved = await orchestrator(tmp_path / "open", net, network_allow=[], approvals=CountingApprover())
    try:
        unrestricted = {"tool": "shell_exec", "argv": ["true"], "sandbox_permissions": {"network": True}}
        with pytest.raises(SandboxUnavailable, match="never gets one"):
            await approved.execute(unrestricted, workspace=workspace)
    finally:
        await approved.aclose()
