"""The pretrained EfficientNet-Lite0 recognises real Flickr8k photos (weights + preprocessing right)."""

import numpy as np
import pytest
import torch
from PIL import Image

from catcap.features.efficientnet import EncoderError, ImageEncoder, crop_box, grid_boxes

# ImageNet-1k class indices used below (the packages ship no class names; only these are needed).
DOGS = set(range(151, 269))  # 151 Chihuahua ... 268 Mexican hairless: the dog breeds
BIKES = {444, 671, 870, 880}  # bicycle-built-for-two, mountain bike, tricycle, unicycle
BOATS = {472, 484, 554, 576, 625, 693, 724, 780, 814, 871, 914}  # canoe, catamaran, fireboat, gondola,
# lifeboat, paddle, pirate ship, schooner, speedboat, trimaran, yawl

PHOTOS = {  # Flickr8k image -> (what its captions say, the classes one of the top-5 must be in)
    "1019077836_6fc9b15408.jpg": ("a brown dog chases water from a sprinkler", DOGS),
    "1009434119_febe49276a.jpg": ("a black and white dog running on grass", DOGS),
    "1075716537_62105738b4.jpg": ("a child with a helmet rides a bike", BIKES),
    "1280147517_98767ca3b3.jpg": ("a boat on a lake", BOATS),
}


def test_top5_predictions_make_sense(flickr8k_images, lite0):
    names = list(PHOTOS)
    batch = torch.stack([lite0.preprocess(Image.open(flickr8k_images / n)) for n in names])
    with torch.inference_mode():
        top5 = lite0.classify(batch).topk(5).indices.tolist()
    for name, classes in zip(names, top5):
        what, expected = PHOTOS[name]
        assert expected & set(classes), f"{name} ({what}): top-5 ImageNet classes {classes}"
    assert top5[0][0] in DOGS and top5[1][0] in DOGS  # the dogs are the top-1 guess


def test_grid_pooled_and_classifier_agree(lite0):
    assert lite0.channels == 1280 and lite0.grid == (7, 7) and lite0.input_size == 224
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (180, 300, 3), dtype=np.uint8))
    x = lite0.preprocess(image)
    assert x.shape == (3, 224, 224) and x.dtype == torch.float32
    assert -1.0 <= float(x.min()) and float(x.max()) <= 128 / 128  # (v - 127) / 128 on 0..255
    with torch.inference_mode():
        grid, pooled = lite0(x[None])
        logits = lite0.classify(x[None])
    assert grid.shape == (1, 49, 1280) and pooled.shape == (1, 1280)
    torch.testing.assert_close(lite0.net._fc(pooled), logits, rtol=1e-4, atol=1e-4)


def test_boxes_tile_the_center_crop():
    x0, y0, side = crop_box(300, 180, 224)
    assert side == int(224 / 256 * 180) and (x0, y0) == ((300 - side + 1) // 2, (180 - side + 1) // 2)
    boxes = grid_boxes(300, 180, 224, (7, 7))
    assert boxes.shape == (49, 4)
    assert boxes[0, 0] == x0 and boxes[0, 1] == y0 and boxes[-1, 2] == pytest.approx(x0 + side)
    assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
    assert boxes[1, 0] == pytest.approx(boxes[0, 2])  # row-major: cell 1 is right of cell 0


def test_bad_input_says_what_to_do(lite0):
    with pytest.raises(EncoderError, match="efficientnet-lite0"):
        ImageEncoder("efficientnet-b0")
    with pytest.raises(EncoderError, match=r"expected a batch \(B, 3, 224, 224\)"):
        lite0(torch.zeros(1, 3, 100, 100))
