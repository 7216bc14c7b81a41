"""``catcap serve`` in a real headless Chromium against a real server process: upload a Flickr8k
photo through the page's file input, wait for the caption and the attention display, compare
the caption with the JSON API's for the same photo, see a bad file's error in the page, and
save a screenshot under the test's tmp folder. Skips with a clear message without a browser."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="catcap serve needs the web extra: pip install -e '.[web]'")
pytest.importorskip("multipart", reason="catcap serve needs the web extra: pip install -e '.[web]'")

from serve_fixtures import post_multipart, train_photo_cat  # noqa: E402
from web_helpers import free_port, start_server, stop_server  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, photo paths) of a real catcap serve process with a tiny CAT."""
    root = tmp_path_factory.mktemp("serve_browser")
    checkpoint, photos = train_photo_cat(root)
    port = free_port()
    proc = start_server(["serve", "--checkpoint", str(checkpoint), "--port", str(port), "--backend", "torch",
                         "--samples", str(photos[0].parent)], port, root / "server.log")
    yield f"http://127.0.0.1:{port}", photos
    stop_server(proc)


def wait_for_state(browser, state: str, timeout: float = 60.0) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, timeout).until(lambda d: d.execute_script("return document.body.dataset.state") == state)


def test_the_page_captions_an_uploaded_photo_and_shows_where_each_word_looked(browser, server, tmp_path):
    from selenium.webdriver.common.by import By

    base, photos = server
    photo = photos[1]
    browser.get(base + "/")
    beam = browser.find_element(By.ID, "beam")
    beam.clear()
    beam.send_keys("2")
    browser.find_element(By.ID, "file").send_keys(str(photo))  # choosing a file captions it
    wait_for_state(browser, "done")

    status, api = post_multipart(f"{base}/api/caption", photo.read_bytes(), photo.name, "image/jpeg",
                                 {"beam": "2", "max_length": "20"})
    assert status == 200 and api["caption"]
    assert browser.find_element(By.ID, "caption").text == api["caption"]
    words = browser.find_elements(By.CSS_SELECTOR, "#words span")
    assert [w.text for w in words] == api["tokens"]

    # the attention overlay is drawn over the photo: some cells dimmed, the most attended one not
    painted = browser.execute_script("""
        const c = document.getElementById('overlay'), img = document.getElementById('photo');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let dim = 0, clear = 0;
        for (let i = 3; i < d.length; i += 4) { if (d[i] > 100) dim++; else clear++; }
        return [c.width, img.clientWidth, dim, clear];""")
    assert painted[0] == painted[1] > 0 and painted[2] > 0 and painted[3] > 0, painted
    circles = browser.find_elements(By.CSS_SELECTOR, "#history-curve circle")
    assert len(circles) == len(api["tokens"])

    words[2].click()  # another word: its own attention and history split
    assert "selected" in words[2].get_attribute("class")
    assert f'"{api["tokens"][2]}"' in browser.find_element(By.ID, "history").text
    shot = tmp_path / "serve_page.png"
    browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_the_page_shows_the_servers_error_for_a_file_that_is_not_a_photo(browser, server, tmp_path):
    from selenium.webdriver.common.by import By

    base, _ = server
    fake = tmp_path / "holiday.jpg"
    fake.write_bytes(b"these are my holiday notes, not a photo")
    browser.get(base + "/")
    browser.find_element(By.ID, "file").send_keys(str(fake))
    wait_for_state(browser, "error")
    error = browser.find_element(By.ID, "error")
    assert error.is_displayed()
    assert "not an image" in error.text and "expected a JPEG, PNG or WEBP image" in error.text
    assert "HTTP 415" in error.text
    assert browser.find_element(By.ID, "caption").text == ""
