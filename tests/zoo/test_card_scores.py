"""A bundled model scored from the photos themselves (issue 42): `catcap evaluate --checkpoint
flickr8k-m2 --images DIR --refs ... --split val --beam 3`, the one documented command per model
that reproduces its card's scores (docs/zoo.md), run here on five validation photos.

Checked: the photos go through the checkpoint's own encoder (the cached features equal
`Captioner.image_features` of the same photos within the ONNX/PyTorch tolerance), the captions
scored are `Captioner.generate`'s for those features and settings, a second run reads the
cache instead of extracting again, and without the feature store the error names both ways on."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from catcap.cli.main import main
from help_examples import parse_example
from zoo_photos import FLICKR8K, REPO, flickr8k_captions

DOCUMENTED = re.compile(r"^\s*(catcap evaluate --checkpoint (flickr8k-[a-z0-9]+) --images \S+ .*--beam 3)$", re.M)


@pytest.fixture(scope="module")
def val5(tmp_path_factory):
    """(refs file of five Flickr8k validation photos, their paths)."""
    from catcap import zoo

    if "flickr8k-m2" not in {e.name for e in zoo.list_models()}:
        pytest.skip(f"the bundled model flickr8k-m2 is not in {zoo.zoo_root()}")
    dev = FLICKR8K / "Flickr_8k.devImages.txt"
    if not dev.is_file():
        pytest.skip(f"the Flickr8k split lists are not in {FLICKR8K} (see ../shared/data/flickr8k/README.md)")
    names = dev.read_text().split()[:5]
    photos = [FLICKR8K / "images" / n for n in names]
    if not all(p.is_file() for p in photos):
        pytest.skip(f"Flickr8k photos not found in {FLICKR8K / 'images'}")
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    captions = flickr8k_captions(set(names))
    images = [{"filename": n, "filepath": "", "imgid": int(n.split("_")[0]), "split": "val",
               "sentences": [{"raw": c} for c in captions[n]]} for n in names]
    refs = tmp_path_factory.mktemp("val5") / "dataset_val5.json"
    refs.write_text(json.dumps({"dataset": "flickr8k", "images": images}), encoding="utf-8")
    return refs, photos


def test_docs_give_one_command_per_bundled_model_that_parses():
    from catcap import zoo

    commands = {m.group(2): m.group(1) for m in DOCUMENTED.finditer((REPO / "docs" / "zoo.md").read_text())}
    assert set(commands) == {e.name for e in zoo.list_models()}, commands
    for command in commands.values():
        args = parse_example(shlex.split(command)[1:])
        assert (args.images, args.split, args.num_beams) == ("../shared/data/flickr8k/images", "val", 3)


def test_a_zoo_model_is_scored_from_its_photos_through_its_own_encoder(val5, tmp_path, monkeypatch, capsys):
    from catcap.data.features import open_feature_store
    from catcap.inference.captioner import Captioner

    from catcap.inference import photo_features

    refs, photos = val5
    made = photo_features.cache_path  # a fresh cache folder; the ONNX export stays in the user's cache
    monkeypatch.setattr(photo_features, "cache_path",
                        lambda *args: tmp_path / "cache" / "photo-features" / made(*args).name)
    args = ["evaluate", "--checkpoint", "flickr8k-m2", "--images", str(photos[0].parent), "--refs", str(refs),
            "--split", "val", "--beam", "3", "--metrics", "bleu,rouge,cider", "--save-results",
            str(tmp_path / "results.json"), "--output", str(tmp_path / "scores.json")]
    assert main(args) == 0
    err = capsys.readouterr().err
    [store] = list((tmp_path / "cache" / "photo-features").glob("efficientnet-lite2-*.h5"))
    assert f"features of the 5 val photos in {photos[0].parent}" in err and str(store) in err

    cap = Captioner.from_pretrained("flickr8k-m2", device="cpu")
    ids = [int(p.name.split("_")[0]) for p in photos]
    with open_feature_store(store) as features:
        cached = [features.get(str(i)).regions for i in ids]
    own = cap.image_features([str(p) for p in photos])
    assert max(float(np.abs(a - b).max()) for a, b in zip(cached, own)) < 1e-3  # ONNX vs PyTorch: ~3e-5
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["image_id"] for r in results] == ids
    assert [r["caption"] for r in results] == cap.generate(cached, num_beams=3, max_length=20)
    assert set(json.loads((tmp_path / "scores.json").read_text())["corpus"]) >= {"Bleu_4", "CIDEr"}

    before = store.stat().st_mtime_ns
    assert main(args) == 0
    assert "all of them are in the cache already" in capsys.readouterr().err and store.stat().st_mtime_ns == before


def test_without_the_feature_store_the_error_names_the_extract_command_and_images(val5, tmp_path, capsys):
    refs, _ = val5
    missing = tmp_path / "lite2.h5"
    assert main(["evaluate", "--checkpoint", "flickr8k-m2", "--refs", str(refs), "--split", "val",
                 "--features", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"feature file {missing} does not exist; pass --images IMAGES_DIR" in err
    assert (f"catcap extract --encoder efficientnet-lite2 --images IMAGES_DIR --dataset {refs} --out {missing}"
            in err), err
    assert Path(missing).exists() is False
