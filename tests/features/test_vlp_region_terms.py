"""The VLP preset with both region terms (configs/models/vlp_region_terms.yaml, through the
Flickr8k experiment config flickr8k_vlp_terms.yaml) runs on real Flickr8k photos: `catcap
extract --encoder efficientnet-lite2` stores each grid cell's box (the geometry term) and the
Lite2 grid whose cells Lite2's own ImageNet head classifies (the class term); a model trains on
it and captions a photo file exactly as its stored features. A store of another encoder, or
without one, is refused before training."""

import json
import shutil
from pathlib import Path

import pytest

from catcap import api
from catcap.data.feature_base import FeatureStoreError
from catcap.data.features import open_feature_store
from catcap.features.extract import extract_features

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SMALL = {"model.d_model": 32, "model.num_heads": 2, "model.decoder_layers": 1, "model.d_ff": 64,
         "train.epochs": 1, "train.batch_size": 10, "train.progress": "false", "data.min_count": 1,
         "data.val_split": "val"}


@pytest.fixture(scope="module")
def photos(flickr8k_images, lite2, tmp_path_factory):
    root = tmp_path_factory.mktemp("vlp_terms")
    folder = root / "photos"
    folder.mkdir()
    paths = sorted(flickr8k_images.glob("*.jpg"))[10:16]
    for path in paths:
        shutil.copy(path, folder / path.name)
    extract_features(folder, root / "lite2.h5", lite2, batch_size=6, workers=0, progress=False)
    images = [{"filename": p.name, "split": "train" if i < 4 else "val", "imgid": p.stem,
               "sentences": [{"raw": "a dog runs on the grass"}, {"raw": "two people stand by a wall"}]}
              for i, p in enumerate(paths)]
    (root / "data.json").write_text(json.dumps({"images": images}))
    return root, folder / paths[4].name, paths[4].stem


def overrides(root: Path, **more) -> list[str]:
    items = {**SMALL, "data.dataset": root / "data.json", "data.features": root / "lite2.h5", "out_dir": root / "vlp",
             **more}
    return [f"{k}={v}" for k, v in items.items()]


def test_the_extracted_store_carries_what_both_terms_read(photos):
    root, _, key = photos
    with open_feature_store(root / "lite2.h5") as store:
        feats = store.get(key)
        assert store.meta["encoder"] == "efficientnet-lite2" and store.feature_dim == 1280
        assert feats.regions.shape == (81, 1280) and feats.boxes.shape == (81, 4)  # Lite2's 9 x 9 grid


def test_the_preset_trains_and_captions_a_photo_as_its_features(photos):
    root, photo, key = photos
    api.train(str(CONFIGS / "experiments" / "flickr8k_vlp_terms.yaml"), overrides(root), log=lambda m: None)
    config = json.loads((root / "vlp" / "last" / "config.json").read_text())["config"]["model"]
    assert (config["region_geometry"], config["region_classes"], config["feature_dim"]) == (True, "efficientnet-lite2", 1280)
    [(_, from_photo)] = api.caption(root / "vlp" / "last", [str(photo)], num_beams=2, max_length=6)
    [(_, from_key)] = api.caption(root / "vlp" / "last", [key], features=str(root / "lite2.h5"), num_beams=2, max_length=6)
    assert from_photo == from_key and from_photo


def test_a_store_of_another_encoder_is_refused(photos):
    root, _, _ = photos
    with pytest.raises(FeatureStoreError, match="model.region_classes=efficientnet-lite0 classifies grid cells with "
                       "efficientnet-lite0's ImageNet head, but .* holds efficientnet-lite2 grid features; "
                       "set model.region_classes=efficientnet-lite2"):
        api.train(str(CONFIGS / "experiments" / "flickr8k_vlp_terms.yaml"),
                  overrides(root, **{"model.region_classes": "efficientnet-lite0", "out_dir": root / "refused"}),
                  log=lambda m: None)
    assert not (root / "refused").exists()
