"""Raw photos in, captions out: a checkpoint trained on `catcap extract` features captions image
files through the encoder it recorded, with exactly the features `catcap extract` wrote."""

import pytest
import torch

from catcap.inference.captioner import Captioner
from catcap.config import to_dict
from catcap.data.features import open_feature_store
from catcap.data.vocab import Vocab
from catcap.features.extract import extract_features
from catcap.models.config import ModelConfig
from catcap.training.checkpoint import save_checkpoint
from catcap.training.experiment import ExperimentConfig
from catcap.training.setup import make_model

PHOTOS = ["1019077836_6fc9b15408.jpg", "1075716537_62105738b4.jpg", "1280147517_98767ca3b3.jpg"]


def checkpoint(tmp_path, features_meta, store_path):
    cfg = ExperimentConfig(model=ModelConfig(feature_dim=1280, d_model=32, num_heads=2, encoder_layers=1,
                                             decoder_layers=1, d_ff=64, cross_attention="caca"))
    cfg.data.features = str(store_path)
    vocab = Vocab([f"w{i}" for i in range(40)])
    torch.manual_seed(0)
    model = make_model(cfg, vocab)
    return save_checkpoint(tmp_path / "ckpt", model=model, config=to_dict(cfg), vocab=vocab.to_dict(), features=features_meta)


def test_captions_from_pixels_equal_captions_from_extracted_features(flickr8k_images, lite0, tmp_path):
    photos = [flickr8k_images / p for p in PHOTOS]
    missing = [p for p in photos if not p.exists()]
    if missing:
        pytest.skip(f"test photos missing: {missing}")
    extract_features(photos, tmp_path / "feats.h5", lite0, workers=0, progress=False)
    with open_feature_store(tmp_path / "feats.h5") as store:
        meta, regions = store.meta, [store.get(p.stem).regions for p in photos]
    cap = Captioner.from_pretrained(checkpoint(tmp_path, meta, tmp_path / "feats.h5"))
    assert cap.features_meta["encoder"] == "efficientnet-lite0"
    for got, want in zip(cap.image_features(photos), regions):
        torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want), rtol=1e-4, atol=1e-4)
    from_pixels = cap.generate(images=[str(p) for p in photos], num_beams=2, max_length=6)
    from_store = cap.generate(regions, num_beams=2, max_length=6)
    assert from_pixels == from_store and all(isinstance(t, str) for t in from_pixels)

    from catcap import api
    assert [t for _, t in api.caption(cap_dir(tmp_path), [str(p) for p in photos], num_beams=2, max_length=6)] == from_pixels


def cap_dir(tmp_path):
    return tmp_path / "ckpt"


def test_a_model_without_a_recorded_encoder_says_why_it_cannot_read_pixels(tmp_path):
    cap = Captioner.from_pretrained(checkpoint(tmp_path, {"source_format": "tsv"}, tmp_path / "none.h5"))
    with pytest.raises(ValueError, match="were not made by a catcap image encoder"):
        cap.generate(images=["photo.jpg"])
    with pytest.raises(ValueError, match="pass either features or images= to generate"):
        cap.generate()
