"""Serving the page and driving it in Debian's chromium with Playwright, for the browser test and the
time-to-first-result measurement. Nothing here downloads a browser: Playwright is pointed at /usr/bin/chromium.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phaseplan.app import command

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--headless=new"]


def missing() -> str | None:
    """Why the browser test cannot run here, in one line; None when it can."""
    if not CHROMIUM.exists():
        return "no /usr/bin/chromium (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]'; never `playwright install`)"
    return None


@contextmanager
def served(timeout_s: float = 90.0) -> Iterator[str]:
    """The page served by `phaseplan app`'s command on a free localhost port; its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command(port, "127.0.0.1"), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            end = time.monotonic() + timeout_s
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > end:
                    log.seek(0)
                    raise RuntimeError(f"the app did not start: {log.read().decode(errors='replace')[-2000:]}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian chromium under Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def choose(page: Any, key: str, option: str) -> None:
    """Pick `option` in the select whose widget key ends in `key` (a knob's key carries the study's hash)."""
    box = page.locator(f"[class*='st-key-'][class*='{key}']:not([class*='st-key-curve'])").first
    box.scroll_into_view_if_needed()
    page.wait_for_timeout(300)  # a scroll right after opening would close the list again
    box.get_by_role("button", name="Open").click()
    page.get_by_role("option", name=option, exact=True).click()


def metric(page: Any, label: str, value: str, timeout_ms: float = 120_000) -> None:
    """Wait until the metric `label` shows `value`."""
    page.locator("[data-testid=stMetric]").filter(has_text=label).filter(has_text=value).first.wait_for(
        timeout=timeout_ms
    )


def snapshot(page: Any, path: Path, width: int = 1400) -> None:
    """A screenshot of the whole page: Streamlit scrolls inside its main block, so the viewport grows to fit it."""
    height = page.evaluate(
        "() => Math.max(...['stMain', 'stSidebarContent'].map(id => "
        "document.querySelector(`[data-testid=${id}]`)?.scrollHeight || 0))"
    )
    page.set_viewport_size({"width": width, "height": min(max(int(height), 800), 5000)})
    page.wait_for_timeout(1200)  # charts redraw at the new size
    page.screenshot(path=path)
    page.set_viewport_size({"width": width, "height": 1000})
