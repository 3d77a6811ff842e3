"""Egress on the real cluster: a pod whose profile allows hosts reaches exactly those through our proxy (routed
by the pod's IP: the test cluster's attachment to the pods' network, see docs/kubernetes-cluster.md), a host
off its list is refused and recorded, and the pod has no other way out (no route, no DNS).

The far hosts are an HTTP and a TLS server in a network namespace this test run makes (tests/support/egress.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.settings import EgressListener
from orchestrator.evidence import verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from orchestrator.profiles import ProfileRegistry
from scripts.testcluster.settings import EGRESS_NETNS_PATH, Settings
from tests.support.egress import FETCH, HTTP_PORT, PROBE, TLS_PORT, EgressNet, egress_net
from tests.support.evidence import record_dicts
from tests.support.images import SANDBOX_UID
from tests.support.kube import SandboxSpace, host_env

pytestmark = pytest.mark.k8s

# k8s-cluster.sh's attachment to the pods' network: a namespace of its own on the pod bridge
ATTACHMENT = EgressListener(listen=Settings.from_env(host_env()).egress_listen, netns=str(EGRESS_NETNS_PATH))


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressNet]:
    if not Path(ATTACHMENT.netns or "").exists():
        pytest.skip("the test cluster has no egress attachment (scripts/k8s-cluster.sh up makes it)")
    with egress_net(tmp_path_factory.mktemp("egress-net")) as made:
        yield made


@pytest.fixture
async def orch(sandbox_space: SandboxSpace, tmp_path: Path, net: EgressNet) -> AsyncIterator[Orchestrator]:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    profile = {
        "description": "egress test",
        "extends": "workspace-write",
        "network": {"mode": "allowlist", "allow": ["web.test:8080", "tls.test:8443"]},
    }
    (profiles / "egress-web.yaml").write_text(yaml.safe_dump(profile))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "safety": {"mode": "allow", "denylist": [], "rules": [], "network_allow": profile["network"]["allow"]},
                "approvals": {"provider": "rules", "default": "approved"},
                "egress": {"hosts": net.hosts},
            }
        )
    )
    o = build_orchestrator(
        config,
        evidence_path=tmp_path / "evidence.jsonl",
        backend=KubernetesBackend(sandbox_space.settings(egress=ATTACHMENT)),
        profiles=ProfileRegistry(extra_dirs=[profiles]),
    )
    yield o
    await o.aclose()
    assert verify(tmp_path / "evidence.jsonl").ok


@pytest.fixture
def workspace(sandbox_space: SandboxSpace, net: EgressNet) -> Path:
    ws = sandbox_space.workspace()
    for name, text in (("fetch.py", FETCH), ("probe.py", PROBE), ("ca.pem", net.ca_pem)):
        (ws / name).write_text(text)
        os.chown(ws / name, SANDBOX_UID, SANDBOX_UID)
    return ws


def answer(result: ExecutionResult) -> dict[str, Any]:
    out = result.to_json()
    return {**json.loads(out["stdout"] or "{}"), "exit_code": out["exit_code"], "run_error": out["error"]}


async def test_a_pod_reaches_its_allowlisted_hosts_through_the_proxy_and_nothing_else(
    orch: Orchestrator, tmp_path: Path, net: EgressNet, workspace: Path
) -> None:
    def fetch(url: str) -> dict[str, Any]:
        return {"tool": "shell_exec", "argv": ["python3", "fetch.py", url], "profile": "egress-web"}

    plain = await orch.execute(fetch(f"http://web.test:{HTTP_PORT}/hello"), workspace=workspace)
    assert answer(plain)["ok"] and answer(plain)["body"].startswith(f"hello from {HTTP_PORT}"), answer(plain)
    [connection] = record_dicts(tmp_path / "evidence.jsonl", plain.authorization.execution_id, "egress_connection")
    assert (connection["data"]["host"], connection["data"]["allowed"]) == ("web.test", True)
    assert connection["data"]["bytes_down"] > 0

    tls = await orch.execute(fetch(f"https://tls.test:{TLS_PORT}/hello"), workspace=workspace)
    assert answer(tls)["ok"], answer(tls)
    [tunnel] = record_dicts(tmp_path / "evidence.jsonl", tls.authorization.execution_id, "egress_connection")
    assert (tunnel["data"]["method"], tunnel["data"]["sni"]) == ("CONNECT", "tls.test")

    refused = await orch.execute(fetch(f"http://other.test:{HTTP_PORT}/hello"), workspace=workspace)
    assert not answer(refused)["ok"] and "403" in answer(refused)["error"]
    assert refused.to_json()["error"]["code"] == "SANDBOX.RESTRICTED"
    [off_list] = record_dicts(tmp_path / "evidence.jsonl", refused.authorization.execution_id, "egress_connection")
    assert (off_list["status"], off_list["data"]["refusal"]) == ("refused", "not_allowed")

    # no way around the proxy: the far host directly, and no name resolves in the pod
    probe = {"tool": "shell_exec", "argv": ["python3", "probe.py", net.far_ip, str(HTTP_PORT)], "profile": "egress-web"}
    got = answer(await orch.execute(probe, workspace=workspace))
    assert got["direct"] in ("ENETUNREACH", "EHOSTUNREACH", "ETIMEDOUT"), got
    assert got["dns"] == "gaierror", got
