"""Real headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by Selenium.

The tests skip with a reason when the browser, its driver or Selenium is
missing; ``.ci/run`` installs the Debian packages on a fresh machine (a
downloaded browser build does not run there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("OTEL_BREAKER_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OTEL_BREAKER_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
#: Where the screenshots shown in docs/dashboards.md are written by each run.
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def _require_browser() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    if missing:
        pytest.skip(
            f"headless browser tests need Debian's chromium and chromium-driver ({', '.join(missing)} missing): "
            "apt-get install chromium chromium-driver (.ci/run does)"
        )
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")


class Browser:
    """One headless Chromium window, with its network log and an alert counter."""

    def __init__(self, width: int = 1280, height: int = 800) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
        ):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        # Any dialog the page opens is counted instead of shown: an injected onerror=alert(1) would count.
        self.driver.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument",
            {
                "source": "window.__dialogs = 0; for (const name of ['alert', 'confirm']) "
                "{ window[name] = () => { window.__dialogs += 1; }; }"
            },
        )
        if width < 500:  # below Chrome's smallest window: emulate the phone's screen
            self.driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True},
            )
        self._requests: list[str] = []

    def open(self, url: str) -> float:
        """Load ``url`` and wait for the board's first data; seconds from navigation to ready."""
        started = time.monotonic()
        self.driver.get(url)
        self.wait(lambda: self.driver.execute_script("return document.body.dataset.ready === '1'"), 10)
        return time.monotonic() - started

    def wait(self, condition: Callable[[], Any], timeout: float, step: float = 0.02) -> Any:
        """Poll the page until ``condition`` is truthy (a real browser's pace, bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page did not reach the expected state within {timeout} s")
            time.sleep(step)

    def tile(self, tool: str) -> dict[str, Any] | None:
        """What a tool's tile shows: state attribute, badge text, colours, retry text."""
        return self.driver.execute_script(
            """
            const tile = [...document.querySelectorAll('#tiles .tile')].find(t => t.dataset.tool === arguments[0]);
            if (!tile) return null;
            const badge = tile.querySelector('.badge');
            return {state: tile.dataset.state, badge: badge.textContent,
                    name: tile.querySelector('.name').textContent,
                    badgeColour: getComputedStyle(badge).backgroundColor,
                    background: getComputedStyle(tile).backgroundColor,
                    retry: tile.querySelector('.retry').textContent, text: tile.innerText};
            """,
            tool,
        )

    def requested_urls(self) -> list[str]:
        """Every URL the page asked for since the last call (Chrome's performance log)."""
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                self._requests.append(message["params"]["request"]["url"])
        return list(self._requests)

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def screenshot(self, name: str) -> Path:
        IMAGES.mkdir(parents=True, exist_ok=True)
        path = IMAGES / name
        self.driver.save_screenshot(str(path))
        return path

    def quit(self) -> None:
        self.driver.quit()


@pytest.fixture
def browser() -> Iterator[Browser]:
    _require_browser()
    window = Browser()
    yield window
    window.quit()


@pytest.fixture
def phone_browser() -> Iterator[Browser]:
    _require_browser()
    window = Browser(390, 844)
    yield window
    window.quit()


@pytest.fixture
def redis_url(tmp_path) -> Iterator[str]:
    """A redis-server of the test's own on a random loopback port."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
    pytest.importorskip("redis")
    import redis
    from otel_support import free_port

    port = free_port()
    process = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    client = redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.02)
    client.close()
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(10)
