"""Fixtures shared by the integration tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, through the ``playwright`` package (Playwright's own browser downloads are
    never used); skips, saying which is missing, without the package or the ``chromium`` binary."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                                                                 "(pip install playwright; no browser download)")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install chromium); Playwright's bundled browsers are not used")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@dataclass
class WatchedPage:
    """A browser page, with every URL it requested and every console error or warning and uncaught error it had."""

    page: Any
    requests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def watched_page(browser: Any, width: int = 1280, height: int = 900) -> WatchedPage:
    """A new page of ``browser`` that records what it fetches and what goes wrong in it."""
    watched = WatchedPage(browser.new_page(viewport={"width": width, "height": height}))
    watched.page.on("request", lambda r: watched.requests.append(r.url))
    watched.page.on("console", lambda m: watched.problems.append(m.text) if m.type in ("error", "warning") else None)
    watched.page.on("pageerror", lambda e: watched.problems.append(str(e)))
    return watched
