"""A question about a raw photo goes through the image encoder that made the VLP model's
training features: on real Flickr8k photos extracted with EfficientNet-Lite0, asking about the
photo file gives exactly the answers of asking about its feature-store key; with VLP's region
terms (geometry of the grid cells, ImageNet class probabilities per cell) too, so the photo path
and the store path build the same region rows (pixel boxes of any photo size -> the same cells)."""

import json
import shutil
from pathlib import Path

import pytest

from catcap import api
from catcap.features.extract import extract_features
from catcap.training.vqa import VQAConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QA = [{"question": "is there a dog?", "answer": "yes", "type": "exists"},
      {"question": "how many people are there?", "answer": "two", "type": "count"},
      {"question": "what color is the shirt?", "answer": "red", "type": "color"}]


TERMS = {"plain": {}, "terms": {"model.region_geometry": "true", "model.region_classes": "efficientnet-lite0"}}


@pytest.fixture(scope="module", params=list(TERMS))
def vqa_on_photos(request, flickr8k_images, lite0, tmp_path_factory):
    root = tmp_path_factory.mktemp("vqa_photos")
    folder = root / "photos"
    folder.mkdir()
    paths = sorted(flickr8k_images.glob("*.jpg"))[:6]
    for path in paths:
        shutil.copy(path, folder / path.name)
    extract_features(folder, root / "feats.h5", lite0, batch_size=6, workers=0, progress=False)
    images = [{"filename": p.name, "split": "train" if i < 4 else "val", "imgid": p.stem,
               "sentences": [{"raw": "a dog runs on the grass"}, {"raw": "two people in red shirts"}],
               "qa": QA} for i, p in enumerate(paths)]
    (root / "data.json").write_text(json.dumps({"images": images}))
    items = {"data.dataset": root / "data.json", "data.features": root / "feats.h5", "data.min_count": 1,
             "data.val_split": "val", "model.feature_dim": 1280, "model.d_model": 32, "model.num_heads": 2,
             "model.decoder_layers": 1, "model.d_ff": 64, "train.mlm.enabled": "true", "train.epochs": 1,
             "train.batch_size": 10, "train.progress": "false", "out_dir": root / "vlp", **TERMS[request.param]}
    api.train(str(CONFIGS / "models" / "vlp_small.yaml"), [f"{k}={v}" for k, v in items.items()], log=lambda m: None)
    best = api.vqa_train(VQAConfig(checkpoint=str(root / "vlp" / "last"), out_dir=str(root / "vqa"), epochs=1,
                                   batch_size=4, progress=False), log=lambda m: None)
    return best, folder / paths[0].name, paths[0].stem, root


def test_a_photo_is_answered_as_its_extracted_features(vqa_on_photos):
    best, photo, key, _ = vqa_on_photos
    from_photo = api.vqa_ask(best, str(photo), "is there a dog?", top=3)
    from_key = api.vqa_ask(best, key, "is there a dog?", top=3)
    assert [a for a, _ in from_photo] == [a for a, _ in from_key]
    assert [p for _, p in from_photo] == pytest.approx([p for _, p in from_key], abs=1e-5)
    assert {a for a, _ in from_photo} <= {"yes", "two", "red"}


def test_a_photo_is_captioned_as_its_extracted_features(vqa_on_photos):
    _, photo, key, root = vqa_on_photos
    [(_, from_photo)] = api.caption(root / "vlp" / "last", [str(photo)], num_beams=2, max_length=6)
    [(_, from_key)] = api.caption(root / "vlp" / "last", [key], features=str(root / "feats.h5"), num_beams=2, max_length=6)
    assert from_photo == from_key
