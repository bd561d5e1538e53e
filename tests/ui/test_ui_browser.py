"""The run view end to end: ``durable ui`` as a process, the page in headless chromium.

Checks what the page shows against the store (`engine.runs()`), its
filters, a run's timeline (a failed step's error, a waiting run's signal
key), auto-refresh and its toggle, and that user data (an error holding
``<script>``) renders as text. With ``DURABLE_UI_SCREENSHOTS=docs/images``
it saves the screenshots of docs/operating.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ui_flows as flows
from browser import UiServer, browser, screenshot, start_ui, stop_ui
from ui_flows import XSS, Built

from durable import Engine

__all__ = ["browser"]  # the fixture, imported for this module

pytestmark = pytest.mark.slow  # a browser and a server process: a few seconds

WAIT = 20.0


@pytest.fixture(scope="module")
def server(built: Built) -> Iterator[UiServer]:
    """``durable ui`` on the built store, for the module."""
    ui = start_ui(built.url)
    try:
        yield ui
    finally:
        stop_ui(ui)


def wait_until(driver: Any, condition: Any, what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(condition, what)


def open_page(driver: Any, address: str, fragment: str = "#/") -> None:
    """Load the page at ``fragment`` and wait for its first render."""
    driver.get("about:blank")
    driver.get(address + fragment)
    wait_until(
        driver, lambda d: d.execute_script("return document.body.dataset.renders"), "a render"
    )


# The page re-renders every 2 s: read in one script call, not through element
# references that a refresh makes stale.


def rows(driver: Any) -> list[tuple[str, str]]:
    """(run id, state) of each row of the run list, top to bottom."""
    found = driver.execute_script(
        "return [...document.querySelectorAll('#runs tbody tr')]"
        ".map((tr) => [tr.dataset.runId, tr.dataset.state])"
    )
    return [(run_id, state) for run_id, state in found]


def text(driver: Any, selector: str) -> str | None:
    """The rendered text of the first element ``selector`` matches (None: none)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null",
        selector,
    )


def count(driver: Any, selector: str) -> int:
    """How many elements ``selector`` matches."""
    return int(
        driver.execute_script("return document.querySelectorAll(arguments[0]).length", selector)
    )


def click(driver: Any, selector: str) -> None:
    """Click the element ``selector`` matches (again if a refresh replaced it)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    def clicked(d: Any) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, selector).click()
        except StaleElementReferenceException:
            return False
        return True

    wait_until(driver, clicked, f"a click on {selector}")


def store_runs(url: str, **filters: Any) -> list[tuple[str, str]]:
    async def read() -> list[tuple[str, str]]:
        async with Engine(url, role="client") as engine:
            page = await engine.runs(limit=1000, **filters)
            return [(r.run_id, r.state.value) for r in page.runs]

    return asyncio.run(read())


def field(driver: Any, name: str) -> str | None:
    """The value the run's field ``name`` shows."""
    return text(driver, f'#run-fields tr[data-field="{name}"] td')


def test_the_list_shows_what_the_store_holds(browser: Any, server: UiServer, built: Built) -> None:
    open_page(browser, server.address)
    assert rows(browser) == store_runs(built.url)
    assert len(rows(browser)) == 5
    assert "ValueError: disk full" in (text(browser, '#runs tr[data-run-id="r-fails"]') or "")
    waiting = text(browser, '#runs tr[data-run-id="r-waits"]') or ""
    assert "signal approval/r-waits" in waiting
    assert "order=o-9" in waiting
    assert count(browser, "#groups tbody tr") == 1
    assert "3/3" in (text(browser, "#groups tbody tr") or "")
    assert text(browser, "#store") == built.url
    screenshot(browser, "ui-runs.png")


def test_filters_narrow_the_list(browser: Any, server: UiServer, built: Built) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, server.address)
    Select(browser.find_element(By.NAME, "state")).select_by_visible_text("failed")
    click(browser, "#filters button[type=submit]")
    wait_until(browser, lambda d: len(rows(d)) == 2, "the failed runs only")
    assert rows(browser) == store_runs(built.url, state="failed")
    assert [r for r, _ in rows(browser)] == ["r-xss", "r-fails"]
    click(browser, "#clear")
    wait_until(browser, lambda d: len(rows(d)) == 5, "every run again")
    browser.find_element(By.NAME, "attr").send_keys("customer=c-17")
    click(browser, "#filters button[type=submit]")
    wait_until(browser, lambda d: [r for r, _ in rows(d)] == ["r-ok"], "r-ok only")
    assert "attr=customer%3Dc-17" in browser.current_url


def test_a_failed_runs_timeline_shows_the_error(browser: Any, server: UiServer) -> None:
    open_page(browser, server.address)
    click(browser, '#runs tr[data-run-id="r-fails"] a')
    wait_until(browser, lambda d: text(d, "#run-title") == "r-fails", "r-fails shown")
    wait_until(browser, lambda d: count(d, "#timeline tbody tr") == 2, "its 2 positions")
    assert field(browser, "state") == "failed"
    assert field(browser, "error") == "ValueError: disk full"
    cells = browser.execute_script(
        "return [...document.querySelectorAll('#timeline tr[data-position=\"1\"] td')]"
        ".map((td) => td.innerText)"
    )
    assert cells[2:5] == ["ui.boom", "failed", "2"]
    assert cells[9] == "ValueError: disk full"
    screenshot(browser, "ui-run.png")


def test_a_waiting_run_shows_its_signal_key(browser: Any, server: UiServer) -> None:
    open_page(browser, server.address, "#/run/r-waits")
    assert field(browser, "state") == "waiting"
    assert field(browser, "waits on") == "signal approval/r-waits, no timeout"
    wait = text(browser, '#timeline tr[data-position="1"] td.detail')
    assert wait == "signal approval/r-waits"
    assert field(browser, "attributes") == "order=o-9"
    screenshot(browser, "ui-run-waiting.png")


def test_a_script_in_an_error_renders_as_text(browser: Any, server: UiServer) -> None:
    open_page(browser, server.address, "#/run/r-xss")
    assert field(browser, "error") == f"ValueError: {XSS}"
    cell = '#timeline tr[data-position="1"] td.error'
    assert text(browser, cell) == f"ValueError: {XSS}"
    assert count(browser, cell + " *") == 0  # no <b>, no <script>: text
    assert count(browser, "main script, main b") == 0
    assert browser.execute_script("return window.__pwned") is None
    open_page(browser, server.address)
    listed = '#runs tr[data-run-id="r-xss"] td.error'
    assert text(browser, listed) == f"ValueError: {XSS}"
    assert count(browser, listed + " *") == 0
    assert browser.execute_script("return window.__pwned") is None


def test_auto_refresh_picks_up_a_new_run_and_can_be_turned_off(
    browser: Any, server: UiServer, built: Built
) -> None:
    from selenium.webdriver.common.by import By

    open_page(browser, server.address)
    assert "r-late" not in dict(rows(browser))
    asyncio.run(flows.start_late(built.url, "r-late"))
    wait_until(browser, lambda d: dict(rows(d)).get("r-late") == "succeeded", "r-late listed")
    assert rows(browser) == store_runs(built.url)

    click(browser, "#refresh-toggle")
    assert not browser.find_element(By.ID, "refresh-toggle").is_selected()
    renders = browser.execute_script("return document.body.dataset.renders")
    asyncio.run(flows.start_late(built.url, "r-later"))
    time.sleep(2.5 * 2.0)  # 2.5 refresh periods: a negative check has no event to wait for
    assert "r-later" not in dict(rows(browser))
    assert browser.execute_script("return document.body.dataset.renders") == renders
    click(browser, "#refresh-toggle")
    wait_until(browser, lambda d: "r-later" in dict(rows(d)), "r-later listed once back on")
