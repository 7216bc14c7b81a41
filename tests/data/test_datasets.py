"""Datasets, collation and up-front validation on a tiny Karpathy file + a real HDF5 feature file.

Oracle: the tiny file's records (KARPATHY, REGIONS, BOXES) with every id, padding and mask
worked out by hand in the expected values."""

import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from catcap.data.collate import CaptionBatch, ImageBatch, collate_captions, collate_images
from catcap.data.datasets import CaptionDataset, DatasetError, ImageDataset, validate_dataset
from catcap.data.features import FeatureStoreError, HDF5FeatureStore, HDF5FeatureWriter
from catcap.data.karpathy import load_karpathy
from catcap.data.vocab import Vocab

F = 3
KARPATHY = {"images": [
    {"filename": "10.jpg", "imgid": 10, "split": "train", "sentences": [{"raw": "A dog runs."}, {"raw": "A cat"}]},
    {"filename": "11.jpg", "imgid": 11, "split": "train", "sentences": [{"raw": "A big red dog sits."}]},
    {"filename": "12.jpg", "imgid": 12, "split": "val", "sentences": [{"raw": "A cat sits"}, {"raw": "Red car!"}]},
]}
REGIONS = {"10": np.arange(6, dtype=np.float32).reshape(2, F) + 1,
           "11": -np.arange(9, dtype=np.float32).reshape(3, F) - 1,
           "12": np.full((1, F), 7, dtype=np.float32)}
BOXES = {"10": np.array([[0, 0, .5, .5], [.5, .5, 1, 1]], dtype=np.float32), "11": None, "12": None}


@pytest.fixture
def world(tmp_path):
    kp = tmp_path / "dataset_tiny.json"
    kp.write_text(json.dumps(KARPATHY), encoding="utf-8")
    with HDF5FeatureWriter(tmp_path / "feats.h5", F) as w:
        for key, regions in REGIONS.items():
            w.write(key, regions, BOXES[key])
    splits = load_karpathy(kp)
    vocab = Vocab.build([c for r in splits["train"] for c in r.captions], min_count=1)
    store = HDF5FeatureStore(tmp_path / "feats.h5")
    yield splits, store, vocab
    store.close()


def test_vocab_of_the_example(world):
    _, _, vocab = world
    # a: 3, dog: 2, then big, cat, red, runs, sits once each
    assert vocab.tokens[4:] == ["a", "dog", "big", "cat", "red", "runs", "sits"]


def test_caption_dataset_rows_and_items(world):
    splits, store, vocab = world
    ds = CaptionDataset(splits["train"], store, vocab)
    assert len(ds) == 3
    item = ds[1]
    assert (item.key, item.image_id) == ("10", 10)
    assert item.regions.dtype == torch.float32 and torch.equal(item.regions, torch.from_numpy(REGIONS["10"]))
    assert torch.equal(item.boxes, torch.from_numpy(BOXES["10"]))
    assert item.caption.tolist() == [1, 4, 7, 2]  # <bos> a cat <eos>
    assert ds[2].boxes is None and ds[2].caption.tolist() == [1, 4, 6, 8, 5, 10, 2]


def test_caption_batch_masks_and_padding_exact(world):
    splits, store, vocab = world
    batch = collate_captions([CaptionDataset(splits["train"], store, vocab)[i] for i in range(3)])
    assert isinstance(batch, CaptionBatch) and len(batch) == 3
    assert batch.features.shape == (3, 3, F) and batch.features.dtype == torch.float32
    expected = torch.zeros(3, 3, F)
    expected[0, :2] = expected[1, :2] = torch.from_numpy(REGIONS["10"])
    expected[2, :3] = torch.from_numpy(REGIONS["11"])
    assert torch.equal(batch.features, expected)
    assert batch.feature_mask.tolist() == [[True, True, False], [True, True, False], [True, True, True]]
    assert batch.boxes.shape == (3, 3, 4)
    assert batch.boxes[0].tolist() == [[0, 0, .5, .5], [.5, .5, 1, 1], [0, 0, 0, 0]]
    assert batch.boxes[2].abs().sum() == 0
    assert batch.captions.tolist() == [[1, 4, 5, 9, 2, 0, 0],   # <bos> a dog runs <eos> <pad> <pad>
                                       [1, 4, 7, 2, 0, 0, 0],   # <bos> a cat <eos>
                                       [1, 4, 6, 8, 5, 10, 2]]  # <bos> a big red dog sits <eos>
    assert batch.caption_mask.tolist() == [[True] * 5 + [False] * 2, [True] * 4 + [False] * 3, [True] * 7]
    assert batch.caption_mask.dtype == torch.bool and batch.captions.dtype == torch.long
    assert batch.image_ids == [10, 10, 11] and batch.keys == ["10", "10", "11"]


def test_max_len_truncates_words_then_adds_eos(world):
    splits, store, vocab = world
    ds = CaptionDataset(splits["train"], store, vocab, max_len=2)
    assert ds[2].caption.tolist() == [1, 4, 6, 2]  # <bos> a big <eos>


def test_image_dataset_and_batch(world):
    splits, store, vocab = world
    records = splits["train"] + splits["val"]
    ds = ImageDataset(records, store)
    assert len(ds) == 3
    batch = collate_images([ds[i] for i in range(3)])
    assert isinstance(batch, ImageBatch) and batch.image_ids == [10, 11, 12]
    assert batch.feature_mask.tolist() == [[True, True, False], [True, True, True], [True, False, False]]
    assert torch.equal(batch.features[2], torch.tensor([[7.0] * F, [0.0] * F, [0.0] * F]))
    assert batch.references == [[["a", "dog", "runs"], ["a", "cat"]], [["a", "big", "red", "dog", "sits"]],
                                [["a", "cat", "sits"], ["red", "car"]]]
    assert batch.raw_references[2] == ["A cat sits", "Red car!"]
    assert batch.reference_ids is None
    with_ids = collate_images([ImageDataset(records, store, vocab)[2]])
    assert with_ids.reference_ids == [[[4, 7, 10], [8, 3]]]  # "car" is not in the train vocab -> <unk>


def test_to_device_moves_every_tensor(world):
    splits, store, vocab = world
    batch = collate_captions([CaptionDataset(splits["train"], store, vocab)[0]])
    moved = batch.to("meta")
    for name in ("features", "feature_mask", "boxes", "captions", "caption_mask"):
        assert getattr(moved, name).device.type == "meta"
        assert getattr(batch, name).device.type == "cpu"  # a copy; the original is unchanged
    assert moved.image_ids == [10]
    images = collate_images([ImageDataset(splits["val"], store)[0]]).to(torch.device("meta"))
    assert images.features.is_meta and images.references == [[["a", "cat", "sits"], ["red", "car"]]]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_workers(world, num_workers):
    splits, store, vocab = world
    loader = DataLoader(CaptionDataset(splits["train"], store, vocab), batch_size=2, shuffle=False,
                        num_workers=num_workers, collate_fn=collate_captions)
    batches = list(loader)
    assert [len(b) for b in batches] == [2, 1]
    assert batches[0].captions.shape == (2, 5) and batches[1].captions.tolist() == [[1, 4, 6, 8, 5, 10, 2]]
    assert batches[1].feature_mask.tolist() == [[True, True, True]]
    images = list(DataLoader(ImageDataset(splits["train"] + splits["val"], store), batch_size=3,
                             num_workers=num_workers, collate_fn=collate_images))
    assert images[0].image_ids == [10, 11, 12] and images[0].features.shape == (3, 3, F)


@pytest.mark.slow
def test_dataloader_spawned_workers_reopen_the_store(world):
    splits, store, vocab = world
    loader = DataLoader(ImageDataset(splits["val"], store), batch_size=1, num_workers=1,
                        multiprocessing_context="spawn", collate_fn=collate_images)
    (batch,) = list(loader)
    assert batch.features[0, 0].tolist() == [7.0] * F


# -- validate_dataset ----------------------------------------------------------------------

def test_validate_accepts_good_input_and_its_items_are_the_records(world):
    """Good records pass unchanged, and what a dataset then serves is exactly what the records
    and the store hold (KARPATHY and REGIONS above): one item per caption, its image's regions."""
    splits, store, vocab = world
    records = splits["train"] + splits["val"]
    before = [(r.key, [list(c) for c in r.captions], list(r.raw)) for r in records]
    assert validate_dataset(records, store, F) is None
    assert validate_dataset(splits["train"], store) is None  # no width given: not checked
    assert [(r.key, [list(c) for c in r.captions], list(r.raw)) for r in records] == before
    ds = CaptionDataset(records, store, vocab)
    assert [(item.key, vocab.decode(item.caption.tolist())) for item in (ds[i] for i in range(len(ds)))] == [
        ("10", ["a", "dog", "runs"]), ("10", ["a", "cat"]), ("11", ["a", "big", "red", "dog", "sits"]),
        ("12", ["a", "cat", "sits"]), ("12", ["red", "<unk>"])]  # "car" is not in the train vocabulary
    for i in range(len(ds)):
        assert torch.equal(ds[i].regions, torch.from_numpy(REGIONS[ds[i].key]))


def test_validate_empty_records(world):
    _, store, vocab = world
    with pytest.raises(DatasetError, match="at least one image record, found none"):
        validate_dataset([], store, F)
    with pytest.raises(DatasetError, match="at least one image record"):
        CaptionDataset([], store, vocab)


def test_validate_image_without_captions(world):
    splits, store, _ = world
    rec = splits["val"][0]
    rec.captions, rec.raw = [], []
    with pytest.raises(DatasetError, match=r"1 image\(s\) without captions \(first: \['12'\]\)"):
        validate_dataset(splits["train"] + [rec], store, F)


def test_validate_caption_without_words(world):
    splits, store, _ = world
    rec = splits["val"][0]
    rec.captions[1], rec.raw[1] = [], "..."
    with pytest.raises(DatasetError, match=r"image '12', caption 1, raw '\.\.\.'"):
        validate_dataset([rec], store, F)


def test_validate_repeated_images(world):
    splits, store, _ = world
    with pytest.raises(DatasetError, match="repeated image ids"):
        validate_dataset(splits["val"] * 2, store, F)


def test_validate_missing_features(world, tmp_path):
    splits, _, _ = world
    with HDF5FeatureWriter(tmp_path / "partial.h5", F) as w:
        w.write("10", REGIONS["10"])
    with HDF5FeatureStore(tmp_path / "partial.h5") as partial:
        with pytest.raises(FeatureStoreError, match=r"1 of 2 images have no features.*'11'"):
            validate_dataset(splits["train"], partial, F)


def test_validate_wrong_feature_width(world):
    splits, store, _ = world
    with pytest.raises(FeatureStoreError, match="width 3.*expects 2048"):
        validate_dataset(splits["train"], store, 2048)


def test_collate_rejects_mixed_widths(world):
    splits, store, vocab = world
    items = [CaptionDataset(splits["train"], store, vocab)[i] for i in range(2)]
    items[1].regions = torch.zeros(2, F + 1)
    with pytest.raises(ValueError, match="one F"):
        collate_captions(items)
