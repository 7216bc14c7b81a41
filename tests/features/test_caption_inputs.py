"""What `catcap caption` / `catcap evaluate --checkpoint` accept, for a model that reads pixels:
image files and feature-store keys side by side; a missing file, a folder, a beam below 1 or a
store from another image encoder is an error before any captioning runs."""

import numpy as np
import pytest
import torch

from catcap import api
from catcap.inference.captioner import Captioner
from catcap.config import to_dict
from catcap.data.features import open_feature_store
from catcap.data.features_hdf5 import HDF5FeatureWriter
from catcap.data.vocab import Vocab
from catcap.models.config import ModelConfig
from catcap.training.checkpoint import save_checkpoint
from catcap.training.experiment import ExperimentConfig
from catcap.training.setup import make_model

PHOTO = "1019077836_6fc9b15408.jpg"
LITE0 = {"encoder": "efficientnet-lite0"}


def _store(path, keys, encoder):
    rng = np.random.default_rng(0)
    with HDF5FeatureWriter(path, 1280, {"encoder": encoder}) as w:
        for k in keys:
            w.write(k, rng.standard_normal((49, 1280)).astype(np.float32))
    return path


def _checkpoint(tmp_path, store, meta=LITE0):
    cfg = ExperimentConfig(model=ModelConfig(feature_dim=1280, d_model=32, num_heads=2, encoder_layers=1,
                                             decoder_layers=1, d_ff=64))
    cfg.data.features = str(store)
    vocab = Vocab([f"w{i}" for i in range(40)])
    torch.manual_seed(0)
    return save_checkpoint(tmp_path / "ckpt", model=make_model(cfg, vocab), config=to_dict(cfg),
                           vocab=vocab.to_dict(), features=meta)


def test_a_missing_image_file_or_a_folder_is_named_not_looked_up_as_a_key(tmp_path):
    ckpt = _checkpoint(tmp_path, _store(tmp_path / "f.h5", ["a"], "efficientnet-lite0"))
    with pytest.raises(FileNotFoundError, match=r"image file not found: .*photo\.JPG"):
        api.caption(ckpt, ["a", str(tmp_path / "photo.JPG")])
    with pytest.raises(FileNotFoundError, match="image file not found: typo.jpg"):
        api.caption(ckpt, ["typo.jpg"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is a folder with no image files"):  # a folder stands for its images
        api.caption(ckpt, [str(tmp_path / "empty")])
    with pytest.raises(ValueError, match="num_beams must be >= 1"):
        api.caption(ckpt, ["a"], num_beams=0)
    assert len(api.caption(ckpt, ["a"], num_beams=1)) == 1  # a plain key still reads the store


def test_a_store_from_another_encoder_is_refused(tmp_path):
    ckpt = _checkpoint(tmp_path, _store(tmp_path / "lite0.h5", ["a"], "efficientnet-lite0"))
    other = _store(tmp_path / "lite1.h5", ["a"], "efficientnet-lite1")
    with pytest.raises(ValueError, match="holds efficientnet-lite1 features, but this model was trained on "
                                         "efficientnet-lite0 features; extract the images with `catcap extract "
                                         "--encoder efficientnet-lite0`"):
        api.caption(ckpt, ["a"], features=str(other))
    with pytest.raises(ValueError, match="holds efficientnet-lite1 features"):
        Captioner.from_pretrained(ckpt).check_store(open_feature_store(other))


def test_files_and_keys_in_one_call_each_go_their_way(flickr8k_images, lite0, tmp_path):
    photo = flickr8k_images / PHOTO
    if not photo.exists():
        pytest.skip(f"test photo missing: {photo}")
    ckpt = _checkpoint(tmp_path, _store(tmp_path / "f.h5", ["a"], "efficientnet-lite0"),
                       meta=dict(lite0.meta, encoder="efficientnet-lite0"))
    both = api.caption(ckpt, [str(photo), "a"], num_beams=1, max_length=5)
    assert [item for item, _ in both] == [str(photo), "a"]
    assert both[0][1] == api.caption(ckpt, [str(photo)], num_beams=1, max_length=5)[0][1]
    assert both[1][1] == api.caption(ckpt, ["a"], num_beams=1, max_length=5)[0][1]


def test_a_store_of_another_width_gets_advice_for_a_trained_model(tmp_path):
    ckpt = _checkpoint(tmp_path, _store(tmp_path / "lite0.h5", ["a"], "efficientnet-lite0"))
    with HDF5FeatureWriter(tmp_path / "narrow.h5", 8, {}) as w:
        w.write("a", np.ones((3, 8), np.float32))
    with pytest.raises(ValueError, match="holds 8-d features, but this model reads 1280-d features; a trained "
                                         "checkpoint reads only features of the width it was trained on"):
        api.caption(ckpt, ["a"], features=str(tmp_path / "narrow.h5"))


def test_sampling_with_beams_is_refused_not_silently_plain_sampling(tmp_path):
    cap = Captioner.from_pretrained(_checkpoint(tmp_path, _store(tmp_path / "f.h5", ["a"], "efficientnet-lite0")))
    feats = [np.ones((4, 1280), np.float32)]
    with pytest.raises(ValueError, match=r"num_beams must be 1 with do_sample=True \(beam-sample decoding is not offered"):
        cap.generate(feats, do_sample=True, num_beams=5)
    assert len(cap.generate(feats, do_sample=True, num_return_sequences=2, seed=0)[0]) == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"num_beams": 0}, "num_beams must be >= 1"),
    ({"num_return_sequences": 0, "num_beams": 2}, r"num_return_sequences must be between 1 and 2 \(the beams"),
    ({"min_length": 8, "max_length": 3}, r"min_length must be between 0 and max_length=3 \(words\), got 8"),
])
def test_generate_names_contradictory_arguments(tmp_path, kwargs, message):
    cap = Captioner.from_pretrained(_checkpoint(tmp_path, _store(tmp_path / "f.h5", ["a"], "efficientnet-lite0")))
    with pytest.raises(ValueError, match=message):
        cap.generate([np.ones((4, 1280), np.float32)], **kwargs)


def test_generate_refuses_masks_it_would_ignore_or_that_leave_an_image_empty(tmp_path):
    cap = Captioner.from_pretrained(_checkpoint(tmp_path, _store(tmp_path / "f.h5", ["a"], "efficientnet-lite0")))
    feats = torch.ones(2, 4, 1280)
    with pytest.raises(ValueError, match="feature_mask goes with a"):
        cap.generate([np.ones((4, 1280), np.float32)], torch.ones(1, 4, dtype=torch.bool))
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[1] = False
    with pytest.raises(ValueError, match=r"image\(s\) \[1\] of the batch have no real region"):
        cap.generate(feats, mask)
    with pytest.raises(ValueError, match=r"feature_mask must be \(B, N\) = \(2, 4\), got \(2, 3\)"):
        cap.generate(feats, torch.ones(2, 3, dtype=torch.bool))
    assert len(cap.generate(feats, torch.ones(2, 4, dtype=torch.bool))) == 2
