"""``catcap human-eval serve``: the rating app in-process (FastAPI's TestClient), as a real
server process on 127.0.0.1, and in a real headless browser (rate, reload, resume)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the rating app needs the web extra (pip install -e '.[web]')")
from fastapi.testclient import TestClient  # noqa: E402

from caption_files import study_inputs  # noqa: E402
from catcap.web.human_eval.app import create_app  # noqa: E402
from catcap.web.human_eval.study import create_study, load_study  # noqa: E402
from web_helpers import free_port, start_server, stop_server  # noqa: E402


@pytest.fixture
def study(tmp_path):
    inputs = study_inputs(tmp_path / "in", count=6)
    return create_study(tmp_path / "study", inputs["a"], inputs["b"], inputs["refs"], inputs["images"], split="test",
                        n=5, raters=3, seed=3, names="sysalpha,sysbeta")


@pytest.fixture
def client(study):
    return TestClient(create_app(study.folder), follow_redirects=False)


def shown_item(page: str) -> int:
    return int(re.search(r'src="/images/(\d+)\.jpg"', page).group(1))


def photo_item(browser) -> int:
    """The item whose image the browser shows."""
    from selenium.webdriver.common.by import By

    return int(re.search(r"/images/(\d+)\.jpg$", browser.find_element(By.ID, "photo").get_attribute("src")).group(1))


def wait_for_progress(browser, text: str) -> None:
    """Wait until the page (after a submit's POST, redirect and GET) shows ``text`` as progress."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 20, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(
        lambda d: d.find_element(By.ID, "progress").text == text)


def answer(left_system: str, relevance: str, coherence: str) -> dict[str, str]:
    """Which side to click for a wanted system ('A', 'B' or 'none')."""
    def side(system):
        return "none" if system == "none" else ("left" if system == left_system else "right")
    return {"relevance": side(relevance), "coherence": side(coherence)}


def test_landing_page_and_rater_entry(client):
    page = client.get("/")
    assert page.status_code == 200 and 'name="rater"' in page.text and "5 images" in page.text
    assert client.get("/rate", params={"rater": " r2 "}).headers["location"] == "/rate/r2"
    unknown = client.get("/rate", params={"rater": "mallory"})
    assert unknown.status_code == 400 and "there is no rater &#x27;mallory&#x27;" in unknown.text
    missing = client.get("/rate/mallory")
    assert missing.status_code == 404 and "use the id (or the link)" in missing.text


def test_page_shows_the_recorded_order_and_sides_and_escapes(client, study):
    order = study.raters["r1"]["order"]
    page = client.get("/rate/r1").text
    item = order[0]
    assert shown_item(page) == item and "0 / 5 rated" in page
    entry = study.items[item]
    left, right = ((entry["caption_a"], entry["caption_b"]) if study.raters["r1"]["a_left"][item]
                   else (entry["caption_b"], entry["caption_a"]))
    escaped = {c: c.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for c in (left, right)}
    assert re.search(r'id="left-caption">.*?</span>(.*?)</div>', page).group(1) == escaped[left]
    assert re.search(r'id="right-caption">.*?</span>(.*?)</div>', page).group(1) == escaped[right]
    assert "&lt;b&gt;&amp;&lt;/b&gt;" in page and "<b>&</b>" not in page  # B's captions carry markup
    assert "sysalpha" not in page and "sysbeta" not in page and "a.json" not in page  # systems hidden


def test_submit_maps_sides_to_systems_and_resumes(client, study):
    order, a_left = study.raters["r2"]["order"], study.raters["r2"]["a_left"]
    first, second, third = order[:3]
    left = "A" if a_left[first] else "B"
    res = client.post("/rate/r2", data={"item": first, "action": "save", **answer(left, "B", "none")})
    assert res.status_code == 303 and res.headers["location"] == "/rate/r2"
    assert study.store().answers("r2") == {first: {"relevance": "B", "coherence": "none"}}
    assert shown_item(client.get("/rate/r2").text) == second
    client.post("/rate/r2", data={"item": second, "action": "skip"})
    page = client.get("/rate/r2").text
    assert shown_item(page) == third and "2 / 5 rated" in page
    assert client.get("/api/progress/r2").json() == {"rater": "r2", "rated": 2, "total": 5, "next_item": third}
    # going back to the first image shows its answer checked; a new answer replaces it
    back = client.get(f"/rate/r2?item={first}").text
    checked = re.findall(r'id="(\w+-\w+)" required checked', back)
    assert sorted(checked) == sorted([f"relevance-{answer(left, 'B', 'none')['relevance']}", "coherence-none"])
    client.post("/rate/r2", data={"item": first, "action": "save", **answer(left, "A", "A")})
    assert study.store().answers("r2")[first] == {"relevance": "A", "coherence": "A"}
    assert len(study.store().votes()) == 4  # 2 images x 2 criteria, no duplicates


def test_bad_submissions_are_refused_and_store_nothing(client, study):
    item = study.raters["r1"]["order"][0]
    res = client.post("/rate/r1", data={"item": item, "action": "save", "relevance": "left"})
    assert res.status_code == 400 and "please answer every question: for &#x27;coherence&#x27;" in res.text
    assert client.post("/rate/r1", data={"item": 99, "action": "save"}).status_code == 400
    assert client.post("/rate/r1", data={"item": "x"}).status_code == 400
    assert client.post("/rate/r1", data={"item": item, "action": "delete"}).status_code == 400
    assert client.post("/rate/r1", data={"item": item, "relevance": "up", "coherence": "left"}).status_code == 400
    assert client.post("/rate/eve", data={"item": item, "action": "skip"}).status_code == 404
    assert study.store().votes() == []
    assert client.get("/rate/r1?item=7").status_code == 400


def test_images_and_the_end_of_the_study(client, study):
    img = client.get("/images/0.jpg")
    assert img.status_code == 200 and img.headers["content-type"] == "image/jpeg" and img.content[:2] == b"\xff\xd8"
    assert client.get("/images/5.jpg").status_code == 404
    for item in study.raters["r3"]["order"]:
        client.post("/rate/r3", data={"item": item, "action": "save", "relevance": "none", "coherence": "left"})
    done = client.get("/rate/r3").text
    assert "Thank you" in done and "5 / 5 rated" in done
    assert client.get("/api/progress/r3").json()["next_item"] is None


def _post(url: str, fields: dict) -> int:
    """POST a form without following the redirect; returns the status."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    opener = urllib.request.build_opener(NoRedirect)
    try:
        return opener.open(url, data=urllib.parse.urlencode(fields).encode(), timeout=10).status
    except urllib.error.HTTPError as err:
        return err.code


def test_real_server_process(study, tmp_path):
    port = free_port()
    proc = start_server(["human-eval", "serve", str(study.folder), "--port", str(port)], port,
                        tmp_path / "server.log")
    try:
        base = f"http://127.0.0.1:{port}"
        item = study.raters["r1"]["order"][0]
        page = urllib.request.urlopen(f"{base}/rate/r1", timeout=10).read().decode()
        assert shown_item(page) == item and "0 / 5 rated" in page
        assert _post(f"{base}/rate/r1", {"item": item, "action": "save", "relevance": "left",
                                         "coherence": "right"}) == 303
        assert _post(f"{base}/rate/r1", {"item": item, "action": "save"}) == 400  # the server keeps running
        progress = json.loads(urllib.request.urlopen(f"{base}/api/progress/r1", timeout=10).read())
        assert progress["rated"] == 1 and progress["next_item"] == study.raters["r1"]["order"][1]
    finally:
        stop_server(proc)
    left = study.left_system("r1", item)
    assert load_study(study.folder).store().answers("r1") == {
        item: {"relevance": left, "coherence": "B" if left == "A" else "A"}}
    assert f"rater r1: http://localhost:{port}/rate/r1" in (tmp_path / "server.log").read_text()


def test_browser_rates_reloads_and_resumes(browser, study, tmp_path):
    from selenium.webdriver.common.by import By

    port = free_port()
    proc = start_server(["human-eval", "serve", str(study.folder), "--port", str(port)], port, tmp_path / "server.log")
    try:
        order = study.raters["r2"]["order"]
        browser.get(f"http://127.0.0.1:{port}/")
        browser.find_element(By.ID, "rater").send_keys("r2")
        browser.find_element(By.ID, "start").click()
        wait_for_progress(browser, "0 / 5 rated")  # the start page redirected to the rater's page
        assert browser.current_url.endswith("/rate/r2")
        # nothing picked: the form is invalid, so the browser's own check stops "Save and next"
        assert browser.execute_script("return document.getElementById('rating').checkValidity()") is False
        browser.find_element(By.ID, "save").click()
        assert browser.find_element(By.ID, "progress").text == "0 / 5 rated"
        browser.save_screenshot(str(tmp_path / "rating.png"))
        clicks = [("relevance-left", "coherence-none"), ("relevance-right", "coherence-right")]
        for step, (rel, coh) in enumerate(clicks):
            assert photo_item(browser) == order[step]
            browser.find_element(By.CSS_SELECTOR, f"label:has(#{rel})").click()
            browser.find_element(By.CSS_SELECTOR, f"label:has(#{coh})").click()
            browser.find_element(By.ID, "save").click()
            wait_for_progress(browser, f"{step + 1} / 5 rated")
        browser.find_element(By.ID, "skip").click()  # the third image is skipped
        wait_for_progress(browser, "3 / 5 rated")
        browser.refresh()
        assert browser.find_element(By.ID, "progress").text == "3 / 5 rated"
        assert photo_item(browser) == order[3]
        assert browser.find_element(By.ID, "photo").get_property("naturalWidth") == 320  # the image loaded
    finally:
        stop_server(proc)
    answers = study.store().answers("r2")
    left0, left1 = study.left_system("r2", order[0]), study.left_system("r2", order[1])
    assert answers[order[0]] == {"relevance": left0, "coherence": "none"}
    assert answers[order[1]] == {"relevance": "B" if left1 == "A" else "A", "coherence": "B" if left1 == "A" else "A"}
    assert answers[order[2]] == {"relevance": "skip", "coherence": "skip"}
    assert (tmp_path / "rating.png").stat().st_size > 10_000
