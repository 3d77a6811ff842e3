"""The approvals page at /ui in a real browser: Debian's chromium, driven by Playwright, against the real
service (loopback port, real engine, the tokens of conftest.py). Nothing leaves loopback: the browser
resolves no host name and every request the page makes elsewhere is refused and fails the test.

`make setup` installs chromium (scripts/setup.sh); Playwright's own browser download is never used.
Every wait is bounded (STEP_S per step, TEST_S per test); the browser is closed and the service stopped
whatever happens. Screenshots go to $SANDBOX_TEST_ARTIFACTS (default tests/artifacts/)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestrator.domain.wire import ExecutionState
from tests.support.service import ARTIFACTS, Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

STEP_S = 15  # any one wait in the page
RUN_S = 60  # an approved command to finish in its sandbox
TEST_S = 150  # a whole test
HOSTILE = 'echo "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"'
TOKEN_KEY = "sandbox-orchestrator.token"


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, as `make setup` installs it (a test never installs anything itself)."""
    pytest.importorskip("playwright.async_api", reason="playwright is not installed: pip install -e '.[dev]'")
    found = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(found, os.X_OK):
        pytest.skip("chromium is not installed: run `make setup` (as root; `scripts/setup.sh browser` alone)")
    return found


@pytest.fixture
async def ui_harness(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    """The service with an allowlist of `true` only: `uname` and `echo` both ask."""
    safety = {"mode": "ask", "allowlist": ["true"], "approval_timeout_s": 120}
    h = await start_service(write_config(tmp_path, safety=safety))
    try:
        yield h
    finally:
        await h.stop()


@dataclass
class UI:
    page: Any  # playwright.async_api.Page
    origin: str
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # method, url, headers
    refused: list[str] = field(default_factory=list)  # requests that tried to leave the service
    problems: list[str] = field(default_factory=list)  # page errors, CSP / Trusted Types violations

    def fetched(self, path: str) -> int:
        """How many GET requests the page made for ``path`` (the query string aside)."""
        return sum(1 for method, url, _ in self.requests if method == "GET" and urlsplit(url).path == path)

    def check_clean(self) -> None:
        assert not self.refused, f"the page asked for something off the service: {self.refused}"
        assert not self.problems, f"errors in the page: {self.problems}"


@pytest.fixture
async def ui(ui_harness: Harness, chromium: str) -> AsyncIterator[UI]:
    from playwright.async_api import Request, Route, async_playwright, expect

    expect.set_options(timeout=STEP_S * 1000)
    args = [
        # no DNS at all: the page talks to 127.0.0.1 only, and the browser's own services go nowhere
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ]
    if os.geteuid() == 0:
        # Chromium will not start as root with its sandbox on (the setuid / user-namespace sandbox is
        # built to take a normal user's rights away, and refuses to run as root). make test runs as
        # root on CI, so the sandbox is off; this browser loads only the page of the service this test
        # started on loopback, and the request guard below refuses anything else.
        args.append("--no-sandbox")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=args, timeout=30_000)
        try:
            context = await browser.new_context(base_url=ui_harness.url, viewport={"width": 1280, "height": 1000})
            context.set_default_timeout(STEP_S * 1000)
            ui = UI(page=None, origin=ui_harness.url)

            async def guard(route: Route) -> None:
                url = route.request.url
                if url == ui.origin or url.startswith(ui.origin + "/"):
                    await route.continue_()
                else:
                    ui.refused.append(url)
                    await route.abort("blockedbyclient")

            def seen(request: Request) -> None:
                ui.requests.append((request.method, request.url, dict(request.headers)))

            def console(message: Any) -> None:
                text = message.text
                if "Content Security Policy" in text or "Trusted Type" in text:
                    ui.problems.append(text)

            await context.route("**/*", guard)
            page = await context.new_page()
            page.on("request", seen)
            page.on("console", console)
            page.on("pageerror", lambda err: ui.problems.append(f"uncaught: {err}"))
            ui.page = page
            yield ui
        finally:
            await browser.close()


async def sign_in(ui: UI, subject: str, *, live: bool = True) -> None:
    from playwright.async_api import expect

    page = ui.page
    await page.goto("/ui")
    await page.get_by_label("Approver or admin token").fill(token_of(subject))
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#signed-in")).to_be_visible()
    if live:
        await expect(page.locator("#live")).to_have_text("Live updates: on")


async def screenshot(ui: UI, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    await ui.page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


async def test_an_approver_approves_and_sees_the_run_finish_live(ui_harness: Harness, ui: UI) -> None:
    from playwright.async_api import expect

    async with asyncio.timeout(TEST_S):
        view = await ui_harness.client("agent-a").submit({"tool": "shell_command", "command": "uname -s"})
        assert view.state is ExecutionState.PENDING_APPROVAL
        ident = view.execution_id
        page = ui.page
        await sign_in(ui, "approver-a")

        card = page.locator(f'li.approval[data-approval-id="{ident}"]')
        await expect(card.locator("h3 code")).to_have_text("uname -s")
        for shown in ("low", "no risky pattern", "no rule or allowlist entry matched", "default", "team-a"):
            await expect(card).to_contain_text(shown)
        await expect(card).to_contain_text("agent-a")
        await expect(card).to_contain_text("network: no; writable root: no; extra mounts: none")
        await expect(card).to_contain_text(ident)
        countdown = card.locator(".countdown")
        await expect(countdown).to_have_text(re.compile(r"^\d+:\d\d left$"))
        before = await countdown.text_content()
        await expect(countdown).not_to_have_text(before or "")  # it counts down by itself
        row = page.locator(f'tr[data-execution-id="{ident}"]')
        await expect(row.locator(".state")).to_have_text("pending_approval")
        await screenshot(ui, "ui-approvals.png")

        await page.evaluate("window.__sameDocument = true")
        lists = ui.fetched("/v1/executions")
        assert lists == 1  # once, when the live stream opened
        await card.get_by_label("Reason (recorded in the evidence)").fill("looks fine")
        await card.get_by_role("button", name="Approve", exact=True).click()
        await expect(page.locator("#status")).to_have_text("“uname -s”: approved by api:approver-a.")
        await expect(card).to_have_count(0)
        await expect(page.locator("#approvals-empty")).to_be_visible()

        await expect(row.locator(".state")).to_have_text("succeeded", timeout=RUN_S * 1000)
        await expect(row.locator("td.col-4")).to_have_text("0")
        await expect(row.locator("td.col-5")).to_have_text(re.compile(r"^\d+(\.\d+)? m?s$"))
        await expect(row.locator("td.col-6")).to_have_text("ask → approved (api:approver-a)")
        await expect(row.locator("td.col-7")).to_have_text("—")
        # the stream brought it: the page was not reloaded and did not fetch the list again
        assert await page.evaluate("window.__sameDocument") is True
        assert ui.fetched("/v1/executions") == lists

        await row.get_by_role("button", name="Evidence").click()
        records = page.locator("#evidence-records")
        await expect(records.locator('li[data-event="approval_decided"]')).to_contain_text("api:approver-a")
        await expect(records.locator('li[data-event="approval_decided"]')).to_contain_text("looks fine")
        await expect(records.locator('li[data-event="execution_finished"]')).to_have_count(1)
        await expect(page.locator("#evidence-id")).to_have_text(ident)
        await screenshot(ui, "ui-evidence.png")
        ui.check_clean()


async def test_a_denial_shows_the_execution_refused(ui_harness: Harness, ui: UI) -> None:
    from playwright.async_api import expect

    async with asyncio.timeout(TEST_S):
        view = await ui_harness.client("agent-a").submit({"tool": "shell_command", "command": "uname -r"})
        page = ui.page
        await sign_in(ui, "approver-a")
        card = page.locator(f'li.approval[data-approval-id="{view.execution_id}"]')
        await card.get_by_label("Reason (recorded in the evidence)").fill("not today")
        await card.get_by_role("button", name="Deny").click()
        await expect(page.locator("#status")).to_have_text("“uname -r”: denied by api:approver-a.")
        await expect(card).to_have_count(0)
        row = page.locator(f'tr[data-execution-id="{view.execution_id}"]')
        await expect(row.locator(".state")).to_have_text("refused")
        await expect(row.locator("td.col-7")).to_have_text("APPROVAL.DENIED")
        await expect(row.locator("td.col-4")).to_have_text("—")
        done = await ui_harness.client("agent-a").get(view.execution_id)
        assert done.error is not None and done.error.code == "APPROVAL.DENIED"
        ui.check_clean()


async def test_a_hostile_command_renders_as_text(ui_harness: Harness, ui: UI) -> None:
    from playwright.async_api import expect

    async with asyncio.timeout(TEST_S):
        view = await ui_harness.client("agent-a").submit({"tool": "shell_command", "command": HOSTILE})
        assert view.state is ExecutionState.PENDING_APPROVAL
        page = ui.page
        await sign_in(ui, "approver-a")
        card = page.locator(f'li.approval[data-approval-id="{view.execution_id}"]')
        await expect(card.locator("h3 code")).to_have_text(HOSTILE)
        await expect(page.get_by_text(HOSTILE, exact=True).first).to_be_visible()
        row = page.locator(f'tr[data-execution-id="{view.execution_id}"]')
        await expect(row.locator("td.col-1")).to_have_text(HOSTILE)

        await card.get_by_label("Reason (recorded in the evidence)").fill("<b id=bold>no</b>")
        await card.get_by_role("button", name="Deny").click()
        await expect(row.locator(".state")).to_have_text("refused")
        await row.click()
        received = page.locator('#evidence-records li[data-event="request_received"] pre')
        await expect(received).to_contain_text(HOSTILE.replace('"', '\\"'))  # JSON-escaped quotes
        decided = page.locator('#evidence-records li[data-event="approval_decided"]')
        await expect(decided).to_contain_text("<b id=bold>no</b>")

        # nothing in the data became markup: no image, no script but the page's own, no handler ran
        assert await page.locator("img").count() == 0
        scripts = await page.locator("script").evaluate_all("(all) => all.map((s) => s.getAttribute('src'))")
        assert scripts == ["/ui/app.js", "/ui/vendor/uPlot.iife.min.js", "/ui/profiles.js"]  # the page's own
        assert await page.locator("#bold").count() == 0
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        ui.check_clean()


async def test_characters_that_hide_text_are_shown_as_marks(ui_harness: Harness, ui: UI) -> None:
    """A right-to-left override would make `cat ~/.ssh/id_rsa` read backwards: the page shows it as a mark."""
    from playwright.async_api import expect

    command = 'echo "\u202e" ; cat ~/.ssh/id_rsa ; echo "\u202c"'
    async with asyncio.timeout(TEST_S):
        view = await ui_harness.client("agent-a").submit({"tool": "shell_command", "command": command})
        page = ui.page
        await sign_in(ui, "approver-a")
        card = page.locator(f'li.approval[data-approval-id="{view.execution_id}"]')
        shown = 'echo "\\u{202E}" ; cat ~/.ssh/id_rsa ; echo "\\u{202C}"'
        await expect(card.locator("h3 code")).to_have_text(shown)
        assert "\u202e" not in await card.inner_text()
        await card.get_by_role("button", name="Deny").click()
        ui.check_clean()


async def test_a_wrong_token_is_refused_and_no_token_reaches_a_url(ui_harness: Harness, ui: UI) -> None:
    from playwright.async_api import expect

    async with asyncio.timeout(TEST_S):
        page = ui.page
        response = await page.goto("/ui")
        assert response is not None and response.status == 200
        headers = response.headers
        assert headers["content-security-policy"].startswith("default-src 'self'; script-src 'self'")
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"

        error = page.locator("#sign-in-error")
        wrong = "wrong-token-0123456789"
        await page.get_by_label("Approver or admin token").fill(wrong)
        await page.get_by_role("button", name="Sign in").click()
        await expect(error).to_have_text("Sign-in failed: unknown token (AUTH.UNAUTHORIZED, HTTP 401)")
        await expect(page.locator("#signed-in")).to_be_hidden()
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None

        await page.get_by_label("Approver or admin token").fill(token_of("agent-a"))
        await page.get_by_role("button", name="Sign in").click()
        await expect(error).to_have_text(
            "Sign-in failed: an agent token cannot list approvals (AUTH.FORBIDDEN, HTTP 403)"
        )

        await page.get_by_label("Approver or admin token").fill(token_of("approver-a"))
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("#live")).to_have_text("Live updates: on")
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") == token_of("approver-a")
        await page.reload()  # the tab keeps it
        await expect(page.locator("#live")).to_have_text("Live updates: on")
        assert await page.evaluate("document.cookie") == ""
        assert await page.context.cookies() == []

        await page.get_by_role("button", name="Sign out").click()
        await expect(page.get_by_label("Approver or admin token")).to_be_visible()
        assert await page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None

        tokens = [wrong, *(token_of(s) for s in ("agent-a", "approver-a"))]
        for method, url, sent in ui.requests:
            assert not any(t in url for t in tokens), f"a token in a URL: {method} {url}"
            if urlsplit(url).path.startswith("/v1/"):
                assert sent.get("authorization", "").startswith("Bearer "), url
        assert all(t not in page.url for t in tokens)
        assert ui.fetched("/v1/events") >= 2  # signed in twice (the reload), each time a live stream
        ui.check_clean()


async def test_the_apis_refusals_are_shown_as_it_said_them(ui_harness: Harness, ui: UI) -> None:
    """403 (an admin deciding what it submitted itself) and 409 (someone answered first: which)."""
    from playwright.async_api import Route, expect

    async with asyncio.timeout(TEST_S):
        own = await ui_harness.client("admin").submit({"tool": "shell_command", "command": "uname -m"})
        other = await ui_harness.client("agent-a").submit({"tool": "shell_command", "command": "uname -n"})
        page = ui.page

        # no live stream: the page must not learn of the API's answer before the click
        async def refuse(route: Route) -> None:
            await route.abort("connectionrefused")

        await page.route("**/v1/events", refuse)
        await sign_in(ui, "admin", live=False)
        status = page.locator("#status")

        # the list refreshes the page makes after each answer are held until the 409 is shown: the one
        # after the 403 could otherwise land after the other approver's answer and drop that card first
        released = asyncio.Event()

        async def hold_refreshes(route: Route) -> None:
            if route.request.method == "GET":
                await released.wait()
            await route.continue_()

        await page.route("**/v1/approvals", hold_refreshes)

        mine = page.locator(f'li.approval[data-approval-id="{own.execution_id}"]')
        await mine.get_by_role("button", name="Approve", exact=True).click()
        refusal = (
            "Approve “uname -m” failed: an approver cannot decide an execution it submitted itself"
            " (AUTH.FORBIDDEN, HTTP 403)"
        )
        await expect(status).to_have_text(refusal)
        await expect(mine.locator(".outcome")).to_have_text(refusal)
        await expect(mine.get_by_role("button", name="Approve", exact=True)).to_be_enabled()  # still waits

        await ui_harness.client("approver-a").deny(other.execution_id, "first")
        theirs = page.locator(f'li.approval[data-approval-id="{other.execution_id}"]')
        await theirs.get_by_role("button", name="Approve for session").click()
        await expect(status).to_have_text(
            f"Approve for session “uname -n” failed: approval {other.execution_id} is no longer pending:"
            " denied by api:approver-a (APPROVAL.NOT_PENDING, HTTP 409)"
        )
        released.set()
        await expect(theirs).to_have_count(0)  # stale: the refresh after the answer dropped it
        await expect(mine).to_have_count(1)  # the refused one still waits
        # without a stream the lists are still shown (the denied one is refused there)
        row = page.locator(f'tr[data-execution-id="{other.execution_id}"]')
        await expect(row.locator(".state")).to_have_text(re.compile("pending_approval|refused"))
        await expect(page.locator("#live")).to_contain_text("reconnecting")
        await screenshot(ui, "ui-refusals.png")
        ui.check_clean()


async def test_the_page_is_served_from_the_package_under_its_policy(ui_harness: Harness, ui: UI) -> None:
    import aiohttp

    async with asyncio.timeout(TEST_S), aiohttp.ClientSession() as session:
        for path, media in (
            ("/ui", "text/html"),
            ("/ui/", "text/html"),
            ("/ui/app.js", "text/javascript"),
            ("/ui/style.css", "text/css"),
            ("/ui/icon.svg", "image/svg+xml"),
            ("/ui/profiles.js", "text/javascript"),
            ("/ui/vendor/uPlot.iife.min.js", "text/javascript"),
            ("/ui/vendor/uPlot.min.css", "text/css"),
        ):
            async with session.get(ui_harness.url + path) as response:  # no token: the files are public
                assert response.status == 200, path
                assert response.content_type == media, path
                assert response.headers["Content-Security-Policy"].startswith("default-src 'self'"), path
                assert response.headers["X-Content-Type-Options"] == "nosniff", path
        for path in (
            "/ui/secrets.txt",
            "/ui/..%2Fapp.py",
            "/ui/ui.py",
            "/ui/vendor/README.md",
            "/ui/vendor/uPlot.LICENSE",
        ):
            async with session.get(ui_harness.url + path) as response:
                assert response.status == 404, path
                assert (await response.json())["error"]["code"] == "RESOURCE.NOT_FOUND"
        async with session.get(ui_harness.url + "/v1/approvals") as response:  # the data is not public
            assert response.status == 401

        # the CSP's Trusted Types: even a slip to innerHTML in the page's script could not parse markup
        await ui.page.goto("/ui")
        ui.check_clean()
        probe = "() => { try { document.createElement('div').innerHTML = '<b>x</b>'; return 'parsed'; }"
        probe += " catch (err) { return err.name; } }"
        assert await ui.page.evaluate(probe) == "TypeError"
