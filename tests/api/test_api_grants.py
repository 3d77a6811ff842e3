"""Grants through the real service: who may issue, read and revoke them (admins everywhere, approvers for
their own tenants, agents never), another tenant's grant as a 404 like none, validation errors naming the
field, the ledger, a restart; the Python client's methods (blocking and async) and `sandboxctl grants`
against the running service."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.api.grant_handlers import grant_book
from orchestrator.budgets.book import GrantBook, RunCaps
from orchestrator.cli import grants_cmd
from orchestrator.client import Client
from orchestrator.domain.errors import Forbidden, InputInvalid, NotFound
from orchestrator.domain.grants import Budgets, GrantChargePage, GrantRequest, GrantView, Usage
from orchestrator.domain.requests import parse_request
from orchestrator.gate.matching import RequestFacts
from orchestrator.gate.sanitize import sanitize
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

BODY = {"tenant": "team-a", "reason": "nightly tests", "ttl_s": 3600, "budgets": {"executions": 3}}


async def call(
    harness: Harness, method: str, path: str, *, token: str = "admin", body: Any = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token_of(token)}"}
    data = json.dumps(body).encode() if body is not None else None
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, harness.url + path, data=data, headers=headers) as r,
    ):
        return r.status, await r.json()


def book_of(harness: Harness) -> GrantBook:
    return grant_book(harness.runner.app)


def pytest_facts(tenant: str = "team-a") -> RequestFacts:
    request = parse_request({"tool": "shell", "command": ["pytest"], "tenant": tenant, "subject": "ci-1"})
    sanitized, analysis = sanitize(request)
    return RequestFacts(sanitized, analysis, "workspace-write")


async def test_who_may_issue_read_and_revoke(harness: Harness) -> None:
    status, created = await call(harness, "POST", "/v1/grants", body=BODY)
    assert status == 201 and created["id"].startswith("grt_") and created["created_by"] == "api:admin"
    grant_id = created["id"]
    # an approver may not grant in advance what it may not approve: its own requests (allow_self_approval off)
    status, body = await call(harness, "POST", "/v1/grants", token="approver-a", body=BODY)
    assert status == 403 and body["error"]["details"]["fields"] == ["conditions.subject"]
    covering_self = {**BODY, "conditions": {"subject": ["approver-*"]}}
    status, body = await call(harness, "POST", "/v1/grants", token="approver-a", body=covering_self)
    assert status == 403
    others = {**BODY, "conditions": {"subject": ["ci-*"]}}
    status, mine = await call(harness, "POST", "/v1/grants", token="approver-a", body=others)
    assert status == 201 and mine["created_by"] == "api:approver-a"

    # an approver only for its own tenants; an agent never, on any route
    status, body = await call(harness, "POST", "/v1/grants", token="approver-b", body=BODY)
    assert status == 403 and body["error"]["code"] == "AUTH.FORBIDDEN"
    for method, path, sent in (
        ("POST", "/v1/grants", BODY),
        ("GET", "/v1/grants", None),
        ("GET", f"/v1/grants/{grant_id}", None),
        ("DELETE", f"/v1/grants/{grant_id}", None),
        ("GET", f"/v1/grants/{grant_id}/charges", None),
    ):
        status, body = await call(harness, method, path, token="agent-a", body=sent)
        assert status == 403 and body["error"]["code"] == "AUTH.FORBIDDEN", (method, path)

    # another tenant's grant is a 404, in the very words of one that does not exist
    for method, path in (
        ("GET", "/v1/grants/{}"),
        ("DELETE", "/v1/grants/{}"),
        ("GET", "/v1/grants/{}/charges"),
    ):
        status, theirs = await call(harness, method, path.format(grant_id), token="approver-b")
        none_status, none = await call(harness, method, path.format("grt_000000000000000000000000"), token="approver-b")
        assert status == none_status == 404 and theirs["error"]["code"] == "RESOURCE.NOT_FOUND", (method, path)
        assert theirs["error"]["message"].replace(grant_id, "X") == none["error"]["message"].replace(
            "grt_000000000000000000000000", "X"
        )
    status, listed = await call(harness, "GET", "/v1/grants", token="approver-b")
    assert status == 200 and listed == {"items": []}
    status, listed = await call(harness, "GET", "/v1/grants?tenant=team-a", token="approver-b")
    assert status == 200 and listed == {"items": []}
    status, listed = await call(harness, "GET", "/v1/grants", token="approver-a")
    assert [g["id"] for g in listed["items"]] == [grant_id, mine["id"]]
    status, listed = await call(harness, "GET", "/v1/grants?state=revoked", token="admin")
    assert listed == {"items": []}

    # revoke: with a reason, without a body, twice (the first revocation is kept)
    status, revoked = await call(
        harness, "DELETE", f"/v1/grants/{grant_id}", token="approver-a", body={"reason": "done"}
    )
    assert status == 200 and revoked["state"] == "revoked" and revoked["revoked_by"] == "api:approver-a"
    status, again = await call(harness, "DELETE", f"/v1/grants/{grant_id}", token="admin")
    assert status == 200 and (again["revoked_by"], again["revoke_reason"]) == ("api:approver-a", "done")
    status, listed = await call(harness, "GET", "/v1/grants?state=revoked", token="admin")
    assert [g["id"] for g in listed["items"]] == [grant_id]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "conditions": {"argv_glob": "pytest [z-a]"}}, "conditions.argv_glob"),
        ({**BODY, "conditions": {"tool": ["nope"]}}, "conditions.tool"),
        ({**BODY, "conditions": {"argv_prefix": "/"}}, "conditions.argv_prefix"),
        ({**BODY, "conditions": {"subject": ["ci-["]}}, "conditions.subject.0"),
        ({**BODY, "budgets": {"executions": 0}}, "budgets.executions"),
        ({**BODY, "budgets": {"cpu_seconds": "lots"}}, "budgets.cpu_seconds"),
        ({**BODY, "expires_at": "2030-01-01T00:00:00Z"}, "(root)"),  # and ttl_s: one at most
        ({**BODY, "expires_at": "2001-01-01T00:00:00Z", "ttl_s": None}, "expires_at"),
        ({k: v for k, v in BODY.items() if k != "reason"}, "reason"),
        ({**BODY, "tenant": ""}, "tenant"),
    ],
)
async def test_validation_errors_name_the_field(harness: Harness, body: dict[str, Any], field: str) -> None:
    status, answer = await call(harness, "POST", "/v1/grants", body=body)
    assert status == 400 and answer["error"]["code"] == "INPUT.INVALID", answer
    assert field in answer["error"]["details"]["fields"], answer


async def test_bad_queries_and_bodies_are_400(harness: Harness) -> None:
    status, answer = await call(harness, "GET", "/v1/grants?state=bogus")
    assert status == 400 and answer["error"]["details"]["fields"] == ["state"]
    _, created = await call(harness, "POST", "/v1/grants", body=BODY)
    status, answer = await call(harness, "GET", f"/v1/grants/{created['id']}/charges?limit=0")
    assert status == 400 and answer["error"]["details"]["fields"] == ["limit"]
    status, answer = await call(harness, "GET", f"/v1/grants/{created['id']}/charges?cursor=x")
    assert status == 400 and answer["error"]["details"]["fields"] == ["cursor"]
    status, answer = await call(harness, "DELETE", f"/v1/grants/{created['id']}", body={"why": "x"})
    assert status == 400 and answer["error"]["details"]["fields"] == ["why"]
    status, answer = await call(harness, "POST", "/v1/grants", body=[1])
    assert status == 400


async def test_the_async_client_and_the_ledger(harness: Harness) -> None:
    admin, approver_b = harness.client("admin"), harness.client("approver-b")
    view = await admin.create_grant(
        GrantRequest(tenant="team-a", reason="ci", ttl_s=600, budgets=Budgets(executions=2, output_bytes=5000))
    )
    assert isinstance(view, GrantView) and view.remaining.executions == 2
    assert await admin.get_grant(view.id) == view
    assert [g.id for g in await admin.list_grants(state="active")] == [view.id]

    # the service's GrantBook covers runs; what they used shows up through the API
    book = book_of(harness)
    caps = RunCaps(wall_seconds=10, cpu_seconds=10, output_bytes=4000)
    one = await book.reserve(tenant="team-a", facts=pytest_facts(), execution_id="ex-1", caps=caps)
    two = await book.reserve(tenant="team-a", facts=pytest_facts(), execution_id="ex-2", caps=caps)
    assert one is not None and two is not None and two.output_bytes == 1000
    await book.settle(one, Usage(executions=1, cpu_seconds=0.5, output_bytes=120, wall_seconds=1.5))
    await book.release(two)
    page = await admin.grant_charges(view.id)
    assert isinstance(page, GrantChargePage) and [(c.execution_id, c.kind) for c in page.items] == [
        ("ex-1", "settled"),
        ("ex-2", "released"),
    ]
    assert page.items[0].charged == Usage(executions=1, cpu_seconds=0.5, output_bytes=120, wall_seconds=1.5)
    first = await admin.grant_charges(view.id, limit=1)
    assert len(first.items) == 1 and first.next_cursor is not None
    rest = await admin.grant_charges(view.id, cursor=first.next_cursor)
    assert [c.execution_id for c in rest.items] == ["ex-2"]
    now = await admin.get_grant(view.id)
    assert now.used.executions == 1 and now.remaining.executions == 1 and now.remaining.output_bytes == 4880

    # refusals raise the library's own exceptions
    with pytest.raises(NotFound):
        await approver_b.get_grant(view.id)
    with pytest.raises(Forbidden):
        await harness.client("agent-a").list_grants()
    with pytest.raises(InputInvalid) as err:
        await admin.create_grant({"tenant": "team-a", "reason": "x"})
    assert err.value.details["http_status"] == 400

    # a revocation through the API stops the next reservation at once
    revoked = await admin.revoke_grant(view.id, "enough")
    assert revoked.state == "revoked" and revoked.revoke_reason == "enough"
    assert await book.reserve(tenant="team-a", facts=pytest_facts(), execution_id="ex-3", caps=caps) is None


async def test_the_blocking_client(harness: Harness) -> None:
    def use() -> tuple[GrantView, list[GrantView], GrantView, GrantChargePage]:
        client = Client(harness.url, token_of("approver-a"))
        view = client.create_grant({**BODY, "conditions": {"argv_prefix": "pytest", "subject": ["ci-*"]}})
        return view, client.list_grants(tenant="team-a"), client.revoke_grant(view.id), client.grant_charges(view.id)

    view, listed, revoked, charges = await asyncio.to_thread(use)
    assert view.conditions.argv_prefix == "pytest" and [g.id for g in listed] == [view.id]
    assert revoked.state == "revoked" and revoked.revoke_reason == "" and charges.items == []
    with pytest.raises(NotFound):
        await asyncio.to_thread(Client(harness.url, token_of("approver-b")).revoke_grant, view.id)


async def test_grants_survive_a_restart(tmp_path: Path, engine: Any) -> None:
    config = write_config(tmp_path)
    first = await start_service(config)
    try:
        view = await first.client("admin").create_grant(BODY)
        held = await book_of(first).reserve(
            tenant="team-a", facts=pytest_facts(), execution_id="ex-1", caps=RunCaps(10, 10, 100)
        )
        assert held is not None
    finally:
        await first.stop()
    again = await start_service(config)
    try:
        # the grant is kept; the run its reservation was for died with the first service, whose successor frees
        # it as it starts (nothing runs yet), on the ledger as released, charging nothing
        kept = await again.client("admin").get_grant(view.id)
        assert kept.id == view.id and kept.reserved.executions == 0 and kept.used.executions == 0
        page = await again.client("admin").grant_charges(view.id)
        assert [(c.execution_id, c.kind) for c in page.items] == [("ex-1", "released")]
        assert await book_of(again).recover([]) == []
    finally:
        await again.stop()


# -- sandboxctl grants ---------------------------------------------------------------------------------
def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="sandboxctl")
    sub = parser.add_subparsers(dest="command", required=True)
    grants_cmd.register(sub)
    args = parser.parse_args(["grants", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err


async def test_sandboxctl_grants_against_the_service(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token_of("approver-a") + "\n")
    conn = ("--url", harness.url, "--token-file", str(token_file))

    def run(*argv: str) -> tuple[int, str, str]:
        return cli(capsys, *argv)

    code, out, err = await asyncio.to_thread(
        run,
        "create",
        *conn,
        "--tenant",
        "team-a",
        "--argv-prefix",
        "pytest",
        "--subject",
        "ci-*",
        "--tool",
        "exec",
        "--ttl",
        "8h",
        "--executions",
        "10",
        "--output-bytes",
        "10m",
        "--cpu-seconds",
        "90s",
        "--reason",
        "nightly",
        "--json",
    )
    assert code == 0 and err == "", err
    created = json.loads(out)
    budgets = {"executions": 10, "cpu_seconds": 90.0, "output_bytes": 10 * 1024 * 1024, "wall_seconds": None}
    conditions = {
        "tool": ["exec"],
        "argv_prefix": "pytest",
        "argv_glob": None,
        "subject": ["ci-*"],
        "profile": None,
        "ci": None,
    }
    assert created["budgets"] == budgets and created["conditions"] == conditions
    grant_id = created["id"]

    code, out, _ = await asyncio.to_thread(run, "list", *conn)
    assert code == 0 and grant_id in out and "10/10 runs" in out and "nightly" in out
    code, out, _ = await asyncio.to_thread(run, "show", grant_id, *conn)
    assert code == 0 and "argv_prefix=pytest" in out and "active" in out
    book = book_of(harness)
    held = await book.reserve(tenant="team-a", facts=pytest_facts(), execution_id="ex-1", caps=RunCaps(5, 5, 100))
    assert held is not None
    await book.settle(held, Usage(executions=1, cpu_seconds=1.25, wall_seconds=2, output_bytes=42))
    code, out, _ = await asyncio.to_thread(run, "charges", grant_id, *conn)
    assert code == 0 and "ex-1" in out and "settled" in out and "1.250" in out
    code, out, _ = await asyncio.to_thread(run, "charges", grant_id, *conn, "--json")
    assert [r["charged"]["output_bytes"] for r in json.loads(out)] == [42]
    code, out, _ = await asyncio.to_thread(run, "revoke", grant_id, *conn, "--reason", "done", "--json")
    assert code == 0 and json.loads(out)["state"] == "revoked"

    # clear errors with the stable codes, the token never shown
    code, out, err = await asyncio.to_thread(run, "show", "grt_nope", *conn)
    assert code == 1 and err.startswith("sandboxctl: RESOURCE.NOT_FOUND:")
    code, out, err = await asyncio.to_thread(
        run, "create", *conn, "--tenant", "team-b", "--ttl", "60", "--reason", "x", "--json"
    )
    assert code == 2 and json.loads(out)["error"]["code"] == "AUTH.FORBIDDEN"
    code, out, err = await asyncio.to_thread(
        run, "create", *conn, "--tenant", "team-a", "--ttl", "60", "--argv-glob", "[z-a]", "--reason", "x"
    )
    assert code == 2 and "INPUT.INVALID" in err and "conditions.argv_glob" in err
    code, out, err = await asyncio.to_thread(run, "list", "--url", harness.url, "--token", "wrong-secret-token")
    assert code == 2 and "AUTH.UNAUTHORIZED" in err and "wrong-secret-token" not in out + err
    assert token_of("approver-a") not in out + err
