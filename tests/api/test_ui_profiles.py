"""The profiles view of /ui in a real browser (Debian's chromium through Playwright, as test_ui_browser.py drives
the approvals view, with its fixtures): runs of a small profile that really ended at its limits (a memory bomb
OOM-killed, a sleep past its wall timeout), their distributions drawn by the vendored uPlot under the page's
CSP and Trusted Types with no violation, a run at a limit opened to its evidence, a what-if answered.
Screenshots: ui-profiles.png, ui-profiles-whatif.png."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_ui_browser import TEST_S, UI, chromium, screenshot, sign_in, ui
from tests.support.profile_runs import TINY, TINY_MEMORY, AtLimits, run_to_the_limits, start_profiles_service
from tests.support.service import Harness

pytestmark = pytest.mark.integration
__all__ = ["chromium", "ui"]  # the browser fixtures, shared with the approvals view's tests


@pytest.fixture
async def ui_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: Any) -> AsyncIterator[Harness]:
    """The service with the profile `tiny` (32 MiB, 2 s), for the `ui` fixture."""
    h = await start_profiles_service(tmp_path, monkeypatch)
    try:
        yield h
    finally:
        await h.stop()


async def open_profiles(ui: UI, runs: AtLimits) -> None:
    from playwright.async_api import expect

    page = ui.page
    await sign_in(ui, "admin")
    await page.get_by_role("link", name="Profiles").click()
    await expect(page.locator("#view-profiles")).to_be_visible()
    await expect(page.locator("#view-approvals")).to_be_hidden()
    await expect(page.get_by_role("link", name="Profiles")).to_have_attribute("aria-current", "page")
    await page.get_by_label("Profile", exact=True).select_option(TINY)
    await expect(page.locator("#profile-summary")).to_contain_text(f"3 runs of {TINY} ended in the window; 2 of them")


async def test_the_distributions_drawn_against_the_limits_and_a_run_at_a_limit_opened(
    ui_harness: Harness, ui: UI
) -> None:
    from playwright.async_api import expect

    async with asyncio.timeout(TEST_S):
        runs = await run_to_the_limits(ui_harness)
        page = ui.page
        await open_profiles(ui, runs)

        charts = page.locator("figure.chart")
        await expect(charts).to_have_count(4)
        memory = page.locator('figure.chart[data-measure="memory_peak_bytes"]')
        await expect(memory).to_have_attribute("data-drawn", "true")
        await expect(memory).to_have_attribute("data-limit", str(TINY_MEMORY))
        await expect(memory).to_have_attribute("data-known", "3")
        await expect(memory.locator("figcaption .limit-value")).to_have_text("32 MiB")
        await expect(memory.locator("figcaption .recommended-value")).to_have_text("none (too few runs)")
        # from as few as 3 runs: the recommended line drawn too (the OOM kill's need, its peak of about 32 MiB
        # bumped by at least 100 MiB, + 15 %: some 152 MiB), the chart stretched to hold it
        await page.get_by_label("Recommend from at least").fill("3")
        await page.get_by_role("button", name="Show").click()
        answer = await ui_harness.client("admin").profile_distribution(TINY, min_runs=3)
        recommended = next(h.recommended for h in answer.histograms if h.measure == "memory_peak_bytes")
        assert isinstance(recommended, int) and 150 * 2**20 <= recommended <= 156 * 2**20
        await expect(memory).to_have_attribute("data-recommended", str(recommended))
        await expect(memory.locator("figcaption .recommended-value")).to_have_text(f"{recommended / 2**20:g} MiB")
        await expect(memory.locator("figcaption")).to_contain_text("memory.vpa_oom_bump")
        for measure in ("memory_peak_bytes", "cores", "cpu_seconds", "wall_seconds"):
            chart = page.locator(f'figure.chart[data-measure="{measure}"]')
            await expect(chart).to_have_attribute("data-drawn", "true")
            await expect(chart.locator(".plot canvas")).to_have_count(1)  # uPlot's canvas
            await expect(chart.locator(".u-legend")).to_contain_text("Runs")  # its series, in the DOM
        # the limit line is on the canvas, in the limit's colour, where the chart put it
        pixel = await memory.locator(".plot canvas").evaluate(
            """(canvas) => {
                const figure = canvas.closest('figure');
                const x = Number(figure.dataset.limitX), y = Number(figure.dataset.lineY);
                return Array.from(canvas.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3));
            }"""
        )
        bad = await page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--bad').trim()")
        assert pixel == [int(bad[i : i + 2], 16) for i in (1, 3, 5)], (pixel, bad)
        # the buckets as a table, for a keyboard or a screen reader: 3 runs counted
        await memory.get_by_text("Buckets as a table").click()
        counts = await memory.locator("table.buckets tbody td:nth-child(3)").all_text_contents()
        assert sum(int(n) for n in counts) == 3
        await memory.get_by_text("Buckets as a table").click()  # closed again: the screenshot stays short

        rows = page.locator("#at-limit-body tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_have_attribute("data-execution-id", runs.timeout.execution_id)
        await expect(rows.nth(0)).to_contain_text("wall timeout")
        oom = page.locator(f'#at-limit-body tr[data-execution-id="{runs.oom.execution_id}"]')
        await expect(oom).to_contain_text("out of memory (OOM kill)")
        await expect(oom.locator("td").nth(3)).to_have_text("32 MiB")
        await expect(oom).to_contain_text("team-a")
        await expect(page.locator("#at-limit-count")).to_have_text("(2)")
        await screenshot(ui, "ui-profiles.png")

        await oom.get_by_role("button", name="Evidence").click()
        await expect(page.locator("#evidence")).to_be_visible()
        await expect(page.locator("#evidence-id")).to_have_text(runs.oom.execution_id)
        finished = page.locator('#evidence-records li[data-event="execution_finished"]')
        await expect(finished).to_have_count(1)
        await expect(finished).to_contain_text("SANDBOX.OOM")
        ui.check_clean()  # no CSP or Trusted Types violation: uPlot drew under the page's policy


async def test_a_what_if_answered_from_the_limits_typed(ui_harness: Harness, ui: UI) -> None:
    from playwright.async_api import expect

    async with asyncio.timeout(TEST_S):
        runs = await run_to_the_limits(ui_harness)
        page = ui.page
        await open_profiles(ui, runs)

        error = page.locator("#whatif-error")
        await page.get_by_label("Memory", exact=True).fill("lots")
        await page.get_by_role("button", name="Replay the runs").click()
        await expect(error).to_have_text("Memory: a size such as 512m, 2g or a number of bytes")
        await expect(page.get_by_label("Memory", exact=True)).to_be_focused()

        await page.get_by_label("Memory", exact=True).fill("16m")
        await page.get_by_label("CPUs", exact=True).fill("0.5")
        await page.get_by_label("Wall timeout (seconds)").fill("1")
        await page.get_by_label("Node CPUs").fill("2")
        await page.get_by_label("Node memory").fill("1g")
        await page.get_by_label("Wall timeout (seconds)").press("Enter")  # the keyboard sends the form
        answer = page.locator("#whatif-answer")
        await expect(answer).to_have_attribute("data-runs", "3")
        await expect(error).to_have_text("")

        memory = answer.locator('article.replay[data-key="memory"]')
        await expect(memory.locator("h3")).to_have_text("memory: 32 MiB → 16 MiB")
        await expect(memory).to_have_attribute("data-would-meet", "1")  # the memory bomb; the others peak lower
        await expect(memory).to_have_attribute("data-within", "2")
        await expect(memory).to_contain_text("ended as oom")
        await expect(memory).to_contain_text("headroom at p95")
        wall = answer.locator('article.replay[data-key="wall_timeout_s"]')
        await expect(wall.locator("h3")).to_have_text("wall_timeout_s: 2 s → 1 s")
        await expect(wall.locator(f'button[data-execution-id="{runs.timeout.execution_id}"]')).to_have_count(1)
        node = answer.locator("p.node")
        # 1 cpu and 32 MiB each: 2 at once on 2 cpus; 0.5 cpu and 16 MiB: 4
        await expect(node).to_have_attribute("data-current", "2")
        await expect(node).to_have_attribute("data-proposed", "4")
        await expect(node).to_have_text("A node of 2 CPUs and 1 GiB holds 2 runs at once now, 4 with this change (+2).")
        await screenshot(ui, "ui-profiles-whatif.png")

        await memory.locator(f'button[data-execution-id="{runs.oom.execution_id}"]').click()
        await expect(page.locator("#evidence-id")).to_have_text(runs.oom.execution_id)
        await expect(page.locator('#evidence-records li[data-event="execution_finished"]')).to_have_count(1)
        ui.check_clean()
