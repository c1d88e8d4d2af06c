"""End to end in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`) driven by
Selenium loads the page served by `attnkit serve`, submits a sentence and an image, and finds the
translation and the drawn boxes.

Where /usr/bin/chromium or /usr/bin/chromedriver is missing the test is skipped, so `make test` passes on a
machine without a browser; with ATTNKIT_REQUIRE_BROWSER=1 (set by .ci/run, which installs both) a missing
browser fails it instead. A browser that is there but cannot start always fails it. The test is also skipped
where the optional extra `serve` is not installed."""

from __future__ import annotations

import io
import os
import socket
import threading
import time

import pytest
import torch
from PIL import Image

pytest.importorskip("uvicorn", reason="the optional extra `serve` is not installed")


def png_bytes(width: int = 96, height: int = 80, seed: int = 0) -> bytes:
    """A random-noise PNG."""
    generator = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(height, width, 3, generator=generator) * 255).to(torch.uint8).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-dev-shm-usage", "--window-size=1200,1000"]
REQUIRE_BROWSER = os.environ.get("ATTNKIT_REQUIRE_BROWSER", "") not in ("", "0")


def missing_browser() -> str | None:
    """Why the browser cannot run here (a missing executable), or None."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not missing:
        return None
    return (f"no {' or '.join(missing)}: install Debian's chromium and chromium-driver "
            f"(.ci/run does); set ATTNKIT_REQUIRE_BROWSER=1 to make this a failure")


# A skip is decided before any fixture runs (no models loaded, no server started for nothing).
pytestmark = pytest.mark.skipif(missing_browser() is not None and not REQUIRE_BROWSER,
                                reason=missing_browser() or "")


@pytest.fixture(scope="module", autouse=True)
def browser_installed():
    """With ATTNKIT_REQUIRE_BROWSER=1, a missing browser is a failure of this test (not of the collection)."""
    reason = missing_browser()
    if reason is not None:
        pytest.fail(f"ATTNKIT_REQUIRE_BROWSER is set but there is {reason.split(':')[0]}", pytrace=False)


@pytest.fixture(scope="module")
def server(served):
    import uvicorn

    from attnkit.app.serve import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(create_app(served), host="127.0.0.1", port=port, log_level="warning")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    instance.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # installed: fails if it cannot start
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def test_page_translates_and_draws_boxes(server, browser, served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    translator = next(m.model for m in served.values() if m.kind == "translation")
    wait = WebDriverWait(browser, 60)
    browser.get(server + "/")
    wait.until(ready.text_to_be_present_in_element((By.ID, "models"), "Serving"))

    browser.find_element(By.ID, "text").send_keys("one two three")
    browser.find_element(By.ID, "translate-button").click()
    wait.until(lambda b: b.find_element(By.ID, "translation").get_attribute("data-done") == "true")
    shown = browser.find_element(By.ID, "translation").get_attribute("textContent")
    assert shown == translator.translate(["one two three"])[0]  # the model's own translation, as the API gives it
    assert browser.find_elements(By.CSS_SELECTOR, "#alignment table.alignment td")  # the alignment map is drawn

    image = tmp_path / "picture.png"
    image.write_bytes(png_bytes())
    threshold = browser.find_element(By.ID, "threshold")
    threshold.clear()
    threshold.send_keys("0")
    browser.find_element(By.ID, "image").send_keys(str(image))
    wait.until(lambda b: b.find_element(By.ID, "canvas").get_attribute("data-boxes"))
    drawn = int(browser.find_element(By.ID, "canvas").get_attribute("data-boxes"))
    listed = browser.find_elements(By.CSS_SELECTOR, "#detections li.detection")
    assert drawn > 0 and len(listed) == drawn
    assert len(browser.find_elements(By.CSS_SELECTOR, "#object-maps canvas")) == drawn  # each object's attention
    width = browser.execute_script("return document.getElementById('canvas').width")
    assert width == 96  # the uploaded image, drawn at its size
    assert browser.find_element(By.ID, "detect-error").text == ""
