"""Every model bundled with the repository (``zoo/<name>``) loads from a clean checkout, its files
match the sha256 of its card, and it captions three Flickr8k validation photos with exactly the
recorded strings (greedy, CPU, fp32), so that a silent change in preprocessing, decoding or
weights fails here. The expected captions live in ``<name with _>_captions.json`` beside this
file, written by ``catcap zoo build <name> ... --record-captions tests/zoo/<name>_captions.json``.

The default (flickr8k-m2, catcap.zoo.DEFAULT_MODEL) skips while it is not bundled (docs/zoo.md
says how to bundle it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from zoo_photos import REPO, check_recorded_captions, val_photos

from catcap.inference.captioner import Captioner
from catcap.zoo import DEFAULT_MODEL, read_card

ZOO = REPO / "zoo"
NAMES = sorted({DEFAULT_MODEL} | {p.name for p in ZOO.iterdir() if p.is_dir()} if ZOO.is_dir() else {DEFAULT_MODEL})


def expected_file(name: str) -> Path:
    return Path(__file__).parent / f"{name.replace('-', '_')}_captions.json"


def record_command(name: str) -> str:
    return (f"catcap zoo build {name} --from runs/flickr8k/<run>/best --scores SCORES.json "
            f"--record-captions tests/zoo/{expected_file(name).name}")


def bundled(name: str) -> Path:
    folder = ZOO / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is not bundled yet (docs/zoo.md: {record_command(name)})")
    return folder


@pytest.mark.parametrize("name", NAMES)
def test_the_bundled_model_captions_three_validation_photos_as_recorded(name):
    bundled(name)
    val_photos()  # skips without the photos
    check_recorded_captions(ZOO, name, expected_file(name), record_command(name))


@pytest.mark.parametrize("name", NAMES)
def test_the_bundled_model_is_small_documented_and_loads(name):
    folder = bundled(name)
    assert (folder / "model.safetensors").stat().st_size <= 25e6
    cap = Captioner.from_pretrained(name, device="cpu", zoo=ZOO)  # its files match its card
    assert cap.reads_pixels and cap.dtype == torch.float32
    card = read_card(folder)
    assert card["recipe"] and card["evaluate"] and card["scores"], "the card must record recipe, evaluation, scores"
    text = (folder / "README.md").read_text(encoding="utf-8")
    for needed in ("## Data", "## Recipe", "## Validation scores", "## Licence", "## Known limits"):
        assert needed in text, needed
