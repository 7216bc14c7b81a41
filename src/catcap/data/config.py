"""Data configuration (the ``data:`` section of an experiment config)."""

from __future__ import annotations

from dataclasses import dataclass

from catcap.config import path_field


@dataclass
class DataConfig:
    """Where the captions and features are, and how captions are prepared.

    dataset: a Karpathy-format JSON (``dataset_coco.json``, the built-in world's
    ``dataset_shapes.json``); features: a feature store (``.h5`` file or npz directory)
    keyed by ``str(image_id)``; max_len: training captions are cut to this many words;
    min_count: words seen fewer times in the training split become ``<unk>``.
    """

    dataset: str = path_field("", "input")
    features: str = path_field("", "input")
    max_len: int = 16
    min_count: int = 5
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"

    def __post_init__(self):
        from catcap.config import check_at_least

        check_at_least("data", self, {"max_len": 1, "min_count": 1})
