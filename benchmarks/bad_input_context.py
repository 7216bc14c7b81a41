"""The shared inputs of the bad-input catalogue (benchmarks/bad_inputs.py), made once per run under
its work folder and built lazily (a case names what it needs; the fast subset of the normal test
suite never builds the photo models): a shapes world, tiny trained checkpoints, result files, a
human-evaluation study, a run folder with its picture, real Flickr8k photos with a VLP captioner
and a VQA model trained on their EfficientNet features. Every case reads them and must leave them
byte-identical; the file-making helpers write a case's own malformed inputs."""

from __future__ import annotations

import io
import json
import shutil
import sys
from functools import cached_property
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))
from malformed import huge_jpeg, jpeg_bytes, png_header_only, replace_regions, write  # noqa: E402,F401 (for the cases)

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k" / "images"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
QUIET = {"log": lambda message: None}


def tiny(world, out_dir, **extra) -> list[str]:
    """Overrides of a 1+2-layer D=32 Transformer on the world (tests/tiny_runs.py's recipe)."""
    items = {"data.dataset": world.dataset, "data.features": world.features, "data.min_count": 1,
             "model.feature_dim": 32, "model.d_model": 32, "model.num_heads": 2, "model.encoder_layers": 1,
             "model.decoder_layers": 2, "model.d_ff": 64, "out_dir": out_dir, "train.batch_size": 12,
             "train.epochs": 1, "train.max_steps": 2, "train.schedule.warmup": 20, "train.progress": False,
             "train.log_every": 1, **extra}
    return [f"{k}={v}" for k, v in items.items()]


class Context:
    """The catalogue's shared inputs under ``root/shared`` (each made on first use)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.shared = self.root / "shared"
        self.shared.mkdir(parents=True, exist_ok=True)

    @cached_property
    def world(self):
        from catcap.data.synthetic import make_world

        return make_world(self.shared / "world", num_train=40, num_val=10, num_test=10, seed=5, feature_dim=32,
                          progress=False)

    @cached_property
    def dataset(self) -> dict:
        return json.loads(Path(self.world.dataset).read_text())

    @cached_property
    def test_ids(self) -> list:
        return [im["cocoid"] for im in self.dataset["images"] if im["split"] == "test"]

    @cached_property
    def ckpt(self) -> Path:
        """A tiny Transformer's ``last`` checkpoint; its run folder holds log.jsonl and training.png."""
        from catcap import api
        from catcap.viz.training_curves import plot_training_log

        api.train(None, tiny(self.world, self.shared / "tf"), **QUIET)
        plot_training_log(self.shared / "tf")
        return self.shared / "tf" / "last"

    @property
    def run(self) -> Path:
        return self.ckpt.parent

    @cached_property
    def relative_model(self) -> Path:
        """A tiny Transformer trained in ``shared/rel`` on copies of the world's files named
        relatively (``data/dataset.json``, ``data/features.h5``), as a user's run records them:
        from a folder that has ``data/`` the model reads that folder's files."""
        import os

        rel = self.shared / "rel"
        (rel / "data").mkdir(parents=True, exist_ok=True)
        shutil.copy(self.world.dataset, rel / "data" / "dataset.json")
        shutil.copy(self.world.features, rel / "data" / "features.h5")
        from catcap import api

        here = os.getcwd()
        os.chdir(rel)
        try:
            api.train(None, tiny(self.world, "run", **{"data.dataset": "data/dataset.json",
                                                       "data.features": "data/features.h5"}), **QUIET)
        finally:
            os.chdir(here)
        return rel / "run" / "last"

    @cached_property
    def lstm(self) -> Path:
        """Another model family (Up-Down), for resuming a run of another kind."""
        from catcap import api

        api.train(None, tiny(self.world, self.shared / "lstm", **{
            "train.max_steps": 1, "model.encoder": "embed", "model.decoder": "updown", "model.decoder_layers": 1,
            "model.rnn.word_dim": 16, "model.rnn.att_hidden": 16}), **QUIET)
        return self.shared / "lstm" / "last"

    def _results(self, name: str, caption: str) -> Path:
        path = self.shared / name
        path.write_text(json.dumps([{"image_id": i, "caption": caption} for i in self.test_ids]))
        return path

    @cached_property
    def results(self) -> Path:
        return self._results("results_a.json", "a red circle")

    @cached_property
    def results_b(self) -> Path:
        return self._results("results_b.json", "a blue square next to a circle")

    @cached_property
    def study(self) -> Path:
        from catcap.web.human_eval.study import create_study

        out = self.shared / "study"
        create_study(out, self.results, self.results_b, self.world.dataset, self.world.images, split="test", n=4,
                     raters=3, seed=0)
        return out

    @cached_property
    def photos(self) -> Path:
        """Six Flickr8k photos (copies)."""
        folder = self.shared / "photos"
        folder.mkdir(exist_ok=True)
        for path in sorted(FLICKR8K.glob("*.jpg"))[:6]:
            shutil.copy(path, folder / path.name)
        return folder

    @cached_property
    def photo_model(self) -> Path:
        """A VLP captioner trained (one epoch, masked tokens) on the photos' EfficientNet-Lite0
        features: it captions photo files; ``vqa`` is fine-tuned from it."""
        from catcap import api

        feats = self.shared / "photo_features.h5"
        api.extract(self.photos, feats, workers=0, progress=False)
        images = [{"filename": p.name, "split": "train" if i < 4 else "val", "imgid": p.stem,
                   "sentences": [{"raw": "a dog runs on the grass"}, {"raw": "two people in red shirts"}],
                   "qa": [{"question": "is there a dog?", "answer": "yes", "type": "exists"},
                          {"question": "what color is the shirt?", "answer": "red", "type": "color"}]}
                  for i, p in enumerate(sorted(self.photos.glob("*.jpg")))]
        (self.shared / "photo_data.json").write_text(json.dumps({"images": images}))
        items = {"data.dataset": self.shared / "photo_data.json", "data.features": feats, "data.min_count": 1,
                 "data.val_split": "val", "model.feature_dim": 1280, "model.d_model": 32, "model.num_heads": 2,
                 "model.decoder_layers": 1, "model.d_ff": 64, "train.mlm.enabled": "true", "train.epochs": 1,
                 "train.batch_size": 10, "train.progress": "false", "out_dir": self.shared / "vlp"}
        api.train(str(CONFIGS / "models" / "vlp_small.yaml"), [f"{k}={v}" for k, v in items.items()], **QUIET)
        return self.shared / "vlp" / "last"

    @cached_property
    def vqa(self) -> Path:
        from catcap import api
        from catcap.training.vqa import VQAConfig

        return api.vqa_train(VQAConfig(checkpoint=str(self.photo_model), out_dir=str(self.shared / "vqa"), epochs=1,
                                       batch_size=4, progress=False), **QUIET)


# ---- malformed files -------------------------------------------------------------------------

def png16() -> bytes:
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((32, 40), 32896, dtype=np.uint16)).save(buf, "PNG")
    return buf.getvalue()


def edited_json(src: Path, dst: Path, change) -> Path:
    """A copy of the JSON file ``src`` at ``dst``, changed in place by ``change(data)``."""
    data = json.loads(Path(src).read_text())
    change(data)
    return write(dst, data)


def store_copy(src: Path, dst: Path, change) -> Path:
    """A copy of an HDF5 store changed with h5py (as a foreign tool would write it)."""
    import h5py

    shutil.copy(src, dst)
    with h5py.File(dst, "a") as f:
        change(f)
    return dst


def flip_byte(path: Path, offset_from_end: int = 5) -> Path:
    data = bytearray(path.read_bytes())
    data[len(data) - offset_from_end] ^= 0x10
    path.write_bytes(bytes(data))
    return path


def cut(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path
