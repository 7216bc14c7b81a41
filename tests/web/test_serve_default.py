"""``catcap serve`` with no arguments, as a newcomer runs it: a real server process serving the
bundled default model (flickr8k-m2, whose attention records no per-word weights), driven by a
real headless Chromium. The page says in plain words that there is no map and hides what would
do nothing; picking flickr8k-cat on the page captions the same photo with CAT and shows where
each word looked. Screenshots of both go to the test's tmp folder.

Skips without the bundled models, the Flickr8k photos or a browser."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="catcap serve needs the web extra: pip install -e '.[web]'")
pytest.importorskip("multipart", reason="catcap serve needs the web extra: pip install -e '.[web]'")

from serve_fixtures import flickr8k_photos, get_json  # noqa: E402
from web_helpers import free_port, start_server, stop_server  # noqa: E402

JARGON = ("vanilla attention", "ohc", "returns none", "final pass")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The base URL of `catcap serve` without --checkpoint (a sample folder of two photos)."""
    from catcap import zoo

    names = [e.name for e in zoo.list_models()]
    if not {"flickr8k-m2", "flickr8k-cat"} <= set(names):
        pytest.skip(f"the bundled models flickr8k-m2 and flickr8k-cat are not in {zoo.zoo_root()} (found {names})")
    root = tmp_path_factory.mktemp("serve_default")
    samples = root / "samples"
    samples.mkdir()
    for photo in flickr8k_photos(2):
        (samples / photo.name).symlink_to(photo)
    port = free_port()
    proc = start_server(["serve", "--port", str(port), "--backend", "torch", "--samples", str(samples)], port,
                        root / "server.log")
    yield f"http://127.0.0.1:{port}"
    stop_server(proc)


def test_serve_without_arguments_serves_the_bundled_default_and_offers_the_others(server):
    health = get_json(server + "/health")
    assert health["model"]["checkpoint"] == "flickr8k-m2" and health["model"]["name"] == "M2"
    offered = {m["name"]: m for m in health["models"]}
    assert {"flickr8k-m2", "flickr8k-cat", "flickr8k-vlp"} <= set(offered)
    assert offered["flickr8k-m2"]["loaded"] and not offered["flickr8k-cat"]["loaded"]
    assert offered["flickr8k-m2"]["label"] == "flickr8k-m2: M2, val CIDEr-D 56.2"
    assert offered["flickr8k-cat"]["label"] == "flickr8k-cat: CAT, val CIDEr-D 53.3"


def _wait(browser, state: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.state") == state)


def test_the_page_says_plainly_when_a_model_shows_no_attention_and_a_cat_model_shows_it(browser, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(server + "/")
    from catcap.decoding import GenerationConfig

    defaults = GenerationConfig()  # the form starts where `catcap caption` and generate() decode (issue 42)
    assert browser.find_element(By.ID, "beam").get_attribute("value") == str(defaults.num_beams)
    assert browser.find_element(By.ID, "max_length").get_attribute("value") == str(defaults.max_length)
    pick = Select(browser.find_element(By.ID, "model-pick"))
    assert pick.first_selected_option.get_attribute("value") == "flickr8k-m2"
    browser.find_elements(By.CSS_SELECTOR, "#samples img")[0].click()
    _wait(browser, "done")
    note = browser.find_element(By.ID, "attention-note")
    assert note.is_displayed() and "does not record where in the photo each word came from" in note.text
    page = browser.find_element(By.TAG_NAME, "body").text.lower()
    assert not [j for j in JARGON if j in page], page
    assert not browser.find_element(By.ID, "history-section").is_displayed()
    assert browser.find_element(By.ID, "word-hint").text == ""
    words = browser.find_elements(By.CSS_SELECTOR, "#words span")
    words[1].click()
    assert "selected" not in words[1].get_attribute("class")  # nothing to point at: the words stay plain
    browser.save_screenshot(str(tmp_path / "serve_m2.png"))

    pick.select_by_value("flickr8k-cat")  # the same photo again, with CAT (loaded now, on first use)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return document.body.dataset.state === 'done' && "
        "document.getElementById('model').textContent.startsWith('CAT')"))
    assert not browser.find_element(By.ID, "attention-note").is_displayed()
    assert "where in the photo it looked" in browser.find_element(By.ID, "word-hint").text
    assert browser.find_element(By.ID, "history-section").is_displayed()
    assert browser.find_element(By.ID, "model").text.startswith("CAT")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#history-curve circle")) == \
        len(browser.find_elements(By.CSS_SELECTOR, "#words span"))
    browser.save_screenshot(str(tmp_path / "serve_cat.png"))
    assert (tmp_path / "serve_cat.png").stat().st_size > 20_000
