"""The run view in a real browser: Debian's headless chromium driven by selenium.

`chromium` starts a headless chromium (skipping with what to install when
it, its driver or selenium is missing); `ui_server` runs ``python -m
durable ui URL --port 0`` as a real process and reads the address it
prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
#: Without these a headless chromium on a closed network keeps trying to
#: reach Google's services in the background.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)
#: Set to a directory (e.g. docs/images) to save the page's screenshots there.
SCREENSHOTS = os.environ.get("DURABLE_UI_SCREENSHOTS")


def missing() -> str | None:
    """What the browser tests lack, as an install hint; None when ready."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]'"
    for path, package in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK) and shutil.which(Path(path).name) is None:
            return f"{path} is missing: apt-get install -y {package} (scripts/test does as root)"
    return None


def chromium(profile: Path) -> Any:
    """A headless chromium with a fresh profile in ``profile``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver_path = DRIVER if os.access(DRIVER, os.X_OK) else shutil.which("chromedriver")
    return webdriver.Chrome(options=options, service=Service(driver_path))


@dataclass(frozen=True)
class UiServer:
    """A running ``durable ui`` process and the address it serves."""

    address: str
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless chromium for the module."""
    lack = missing()
    if lack is not None:
        pytest.skip(f"browser tests need chromium: {lack}")
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def start_ui(url: str) -> UiServer:
    """``python -m durable ui URL --port 0`` as a process; its first stdout
    line is the address."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "durable", "ui", url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until the server accepts connections
    if not line.startswith("serving http://127.0.0.1:"):
        process.kill()
        _, err = process.communicate(timeout=10)
        raise AssertionError(f"durable ui printed {line!r}; stderr: {err}")
    return UiServer(line.split()[1], process)


def stop_ui(server: UiServer) -> None:
    """SIGTERM the server; it must exit cleanly with nothing on stderr but its hint."""
    server.process.terminate()
    _, err = server.process.communicate(timeout=20)
    assert server.process.returncode == 0, err
    assert "Traceback" not in err


def screenshot(driver: Any, name: str) -> None:
    """Save the window as ``name`` under `SCREENSHOTS`, when it is set."""
    if SCREENSHOTS:
        folder = Path(SCREENSHOTS)
        folder.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(folder / name))
