"""The ``browser`` fixture of the web tests: a real headless Chromium (Debian's chromium +
chromium-driver, driven by Selenium). Server helpers: ``web_helpers.py``.

The browser tests skip with a clear message where no browser is installed; `.ci/run` installs
it when missing. Chromium runs with the flags that keep it off the (closed) network.
"""

from __future__ import annotations

import shutil

import pytest

CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,1000"]


def _binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium driven by Selenium; quits after the test."""
    chromium, driver_path = _binary("chromium", "chromium-browser"), _binary("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("no browser: install Debian's chromium and chromium-driver "
                    "(apt-get install chromium chromium-driver; .ci/run does this) to run the browser tests")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    drv = webdriver.Chrome(service=Service(driver_path), options=options)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()
