"""A stand-in for the bundled model: a tiny CAT trained in seconds on real Flickr8k photos
(../shared/data/flickr8k, never part of the repository) through EfficientNet-Lite0, and the
three Flickr8k validation photos the zoo tests caption. Skips cleanly without the photos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from zoo_photos import FLICKR8K, REPO, flickr8k_captions, val_photos


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory):
    """(checkpoint dir, [3 val photos]): a tiny CAT (CACA + AWC, d_model 32, 1+1 layers) trained for
    2 epochs on the captions of 5 train photos + the 3 val photos, from their Lite0 features."""
    from catcap import api
    from catcap.features import ImageEncoder
    from catcap.features.extract import extract_features

    photos = val_photos()
    train = sorted((FLICKR8K / "images").glob("*.jpg"))[:5]
    root = tmp_path_factory.mktemp("zoo_stand_in")
    folder = root / "photos"
    folder.mkdir()
    for path in train + photos:
        shutil.copy(path, folder / path.name)
    extract_features(folder, root / "feats.h5", ImageEncoder("efficientnet-lite0"), batch_size=8, workers=0,
                     progress=False)
    captions = flickr8k_captions({p.name for p in train + photos})
    images = [{"filename": p.name, "split": "val" if p in photos else "train", "imgid": p.stem,
               "sentences": [{"raw": c} for c in captions.get(p.name, ["a photo"])]} for p in train + photos]
    (root / "data.json").write_text(json.dumps({"images": images}))
    items = {"name": "zoo_stand_in", "data.dataset": root / "data.json", "data.features": root / "feats.h5",
             "data.min_count": 1, "data.val_split": "val", "model.feature_dim": 1280, "model.d_model": 32,
             "model.num_heads": 2, "model.encoder_layers": 1, "model.decoder_layers": 1, "model.d_ff": 64,
             "model.cross_attention": "caca", "train.awc.enabled": "true", "train.epochs": 2,
             "train.batch_size": 8, "train.progress": "false", "out_dir": root / "cat"}
    api.train(str(REPO / "configs" / "models" / "tiny.yaml"), [f"{k}={v}" for k, v in items.items()],
              log=lambda m: None)
    return root / "cat" / "best", photos


@pytest.fixture(scope="session")
def scores_file(tmp_path_factory) -> Path:
    """A `catcap evaluate --output` file (hand-made numbers, the real format)."""
    path = tmp_path_factory.mktemp("scores") / "val_beam3.json"
    path.write_text(json.dumps({"corpus": {"Bleu_1": 0.64, "Bleu_4": 0.215, "METEOR": 0.2, "ROUGE_L": 0.46,
                                           "CIDEr": 0.512},
                                "unavailable": {"SPICE": "needs the Stanford CoreNLP jars"},
                                "per_image": [{"image_id": i, "CIDEr": 0.5} for i in range(3)]}))
    return path
