"""Debian's Chromium (/usr/bin/chromium), headless, driven by Playwright: the console's
browser tests. Playwright's own browser download is never used (it would fetch from
outside PyPI and Debian); `make setup` installs the chromium package."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Without the background-networking flags Chromium keeps trying to reach Google's
# services, which a closed network refuses, many connections at a time.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise RuntimeError("chromium is not installed and the console tests need it (sudo apt-get install -y chromium)")
    return path


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (playwright.sync_api.Browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def until(page: Any, expression: str, timeout_s: float = 15.0) -> None:
    """Wait for `expression` to hold in `page`, polled. The console's Content-Security-Policy
    forbids the eval that Playwright's wait_for_function needs to poll a string."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"still false after {timeout_s} s: {expression}"
        page.wait_for_timeout(100)
