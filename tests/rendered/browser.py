"""Headless Chromium for the tests that look at pages as a reader does (the rendered book, JupyterLab)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def require_chromium(module_level: bool = False) -> None:
    """Skip without Chromium and ChromeDriver; in CI, where they are installed, fail instead."""
    if CHROMIUM and CHROMEDRIVER:
        return
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Chromium and ChromeDriver (Debian: chromium chromium-driver)")
    pytest.skip("Chromium and ChromeDriver are not installed", allow_module_level=module_level)


def chromium(profile: Path, width: int, height: int, console_log: bool = False):
    """A headless Chromium with a fresh profile that reaches nothing but 127.0.0.1 on its own."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", f"--window-size={width},{height}",
                 f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
