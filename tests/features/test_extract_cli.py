"""`catcap extract` as a user runs it: --dataset keys images by id, --backend onnx, clear errors."""

import json

from catcap.cli.main import main
from catcap.data.features import open_feature_store


def _dataset(tmp_path, names, split="train"):
    images = [{"filename": n, "imgid": int(n.split("_")[0]), "split": split,
               "sentences": [{"raw": "a dog runs on the grass"}]} for n in names]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": images}))
    return path


def test_dataset_images_are_keyed_by_id_with_the_onnx_backend(flickr8k_images, onnx_cache_root, tmp_path,
                                                              monkeypatch, capsys):
    monkeypatch.setenv("CATCAP_CACHE_DIR", str(onnx_cache_root))
    names = [p.name for p in sorted(flickr8k_images.glob("*.jpg"))[:3]]
    dataset = _dataset(tmp_path, names)
    out = tmp_path / "f.h5"
    rc = main(["extract", "--images", str(flickr8k_images), "--dataset", str(dataset), "--out", str(out),
               "--backend", "onnx", "--workers", "0", "--quiet"])
    assert rc == 0 and "3 images extracted" in capsys.readouterr().out
    with open_feature_store(out) as store:
        assert sorted(store.keys()) == sorted(n.split("_")[0] for n in names)  # ids, not file stems
        assert store.meta["encoder"] == "efficientnet-lite0"
    assert list((onnx_cache_root / "onnx").glob("efficientnet-lite0-*.onnx"))


def test_a_missing_dataset_image_stops_before_anything_runs(flickr8k_images, tmp_path, capsys):
    names = [sorted(flickr8k_images.glob("*.jpg"))[0].name, "123_missing.jpg"]
    rc = main(["extract", "--images", str(flickr8k_images), "--dataset", str(_dataset(tmp_path, names)),
               "--out", str(tmp_path / "f.h5"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "1 images of" in err and "123_missing.jpg" in err and "--images" in err
    assert not (tmp_path / "f.h5").exists() and not (tmp_path / "f.h5.partial").exists()


def test_bad_backend_and_output_are_refused_with_a_message(flickr8k_images, tmp_path, capsys):
    rc = main(["extract", "--images", str(flickr8k_images), "--out", str(tmp_path / "f.npz"), "--quiet"])
    assert rc == 2 and ".h5" in capsys.readouterr().err
