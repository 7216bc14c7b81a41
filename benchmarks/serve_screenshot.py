"""Screenshot of `catcap serve` captioning one photo, one word's attention selected.

    python benchmarks/serve_screenshot.py --checkpoint runs/flickr8k/cat/best \
        --photo ../shared/data/flickr8k/images/2490687446_9d46fdf5a9.jpg --word 2 --out runs/faces/serve_demo.png

Starts the server on a free port of 127.0.0.1 (the photo's folder as its samples), uploads the
photo in headless Chromium (Debian's chromium + chromium-driver), clicks word ``--word`` of the
caption and saves the page. Flickr8k photos may not be redistributed with catcap, so a shot of
one stays under runs/ (ignored by git) and docs/faces.md describes it instead of showing it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "web"))
from conftest import CHROMIUM_FLAGS  # noqa: E402
from web_helpers import free_port, start_server, stop_server  # noqa: E402


def browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium")
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def shoot(port: int, photo: Path, word: int, out: Path, profile: Path) -> list[str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    drv = browser(profile)
    try:
        drv.get(f"http://127.0.0.1:{port}/")
        drv.find_element(By.ID, "file").send_keys(str(photo))
        WebDriverWait(drv, 60).until(lambda d: d.execute_script("return document.body.dataset.state") == "done")
        words = drv.find_elements(By.CSS_SELECTOR, "#words span")
        words[word].click()
        time.sleep(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        drv.save_screenshot(str(out))
        return [w.text for w in words]
    finally:
        drv.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--photo", required=True, type=Path)
    parser.add_argument("--word", type=int, default=0, help="index of the caption word to select")
    parser.add_argument("--out", type=Path, default=Path("runs/faces/serve_demo.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proc = start_server(["serve", "--checkpoint", args.checkpoint, "--port", str(port),
                             "--samples", str(args.photo.resolve().parent)], port, Path(tmp) / "server.log")
        try:
            words = shoot(port, args.photo.resolve(), args.word, args.out, Path(tmp) / "profile")
        finally:
            stop_server(proc)
    print(f"caption words {words}; screenshot: {args.out}")


if __name__ == "__main__":
    main()
