"""catcap.data.prepare: vocabulary, encoded captions, CIDEr-D df and summary of a Karpathy JSON.

Oracles: the small example's vocabulary, ids and summary are worked out by hand in the
comments; its document frequencies are counted directly (a set of n-grams per image, counted
over images: ``_brute_force_df``), not with the ``DocumentFrequency`` code that ``prepare``
itself calls. The real-Flickr8k check pins counts of the official split files (6,000 / 1,000
images, 5 captions each) and a range for the vocabulary size (a regression range, not a
property)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from catcap.data.importers import import_flickr8k, write_dataset_json
from catcap.data.karpathy import load_karpathy
from catcap.data.prepare import PrepareError, df_cache_name, load_captions, prepare_dataset, references_fingerprint
from catcap.data.vocab import Vocab
from catcap.metrics.docfreq import DocumentFrequency

FLICKR8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "flickr8k"


def _dataset(path: Path, images: list[tuple[int, str, list[str]]]) -> Path:
    data = {"images": [{"filename": f"{i}.jpg", "imgid": i, "split": s, "sentences": [{"raw": c} for c in caps]}
                       for i, s, caps in images]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# the train images of ``small`` (restval counts as train): their captions, already lower-case words
TRAIN_CAPTIONS = [["a dog runs", "a dog runs fast on the grass"], ["a cat sleeps"], ["a dog"]]


def _brute_force_df(images: list[list[str]], n: int = 4) -> dict[tuple, int]:
    """Document frequency counted directly: for each 1..n-gram, the number of images whose
    captions contain it (a set of n-grams per image, then a count over images)."""
    counts: dict[tuple, int] = {}
    for captions in images:
        grams = set()
        for caption in captions:
            words = caption.split()
            grams |= {tuple(words[i:i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1)}
        for gram in grams:
            counts[gram] = counts.get(gram, 0) + 1
    return counts


def _as_dict(df: DocumentFrequency) -> dict[tuple, int]:
    """{n-gram as a tuple of words: df} from the stored table (word id i is ``words[i - 1]``)."""
    return {tuple(df.words[i - 1] for i in row): int(count)
            for grams, counts in zip(df.grams, df.df) for row, count in zip(grams.tolist(), counts.tolist())}


@pytest.fixture
def small(tmp_path):
    return _dataset(tmp_path / "dataset_tiny.json", [
        (10, "train", ["a dog runs", "a dog runs fast on the grass"]),
        (20, "train", ["a cat sleeps"]),
        (30, "val", ["a bird"]),
        (40, "restval", ["a dog"]),
    ])


def test_prepare_small_exact(small, tmp_path):
    s = prepare_dataset(small, tmp_path / "out", min_count=2, max_len=4)
    vocab = Vocab.from_json(tmp_path / "out" / "vocab.json")
    assert vocab.tokens == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "dog", "runs"]
    z = load_captions(tmp_path / "out" / "captions.npz")
    a, dog, runs, unk = 4, 5, 6, 3
    np.testing.assert_array_equal(z["ids"], [
        [1, a, dog, runs, 2, 0],
        [1, a, dog, runs, unk, 2],   # "a dog runs fast" of 7 words, cut to 4
        [1, a, unk, unk, 2, 0],
        [1, a, dog, 2, 0, 0],        # restval counts as train
    ])
    np.testing.assert_array_equal(z["lengths"], [5, 6, 5, 4])
    np.testing.assert_array_equal(z["num_words"], [3, 7, 3, 2])
    assert z["image_keys"].tolist() == ["10", "10", "20", "40"]
    np.testing.assert_array_equal(z["image_ids"], [10, 10, 20, 40])
    np.testing.assert_array_equal(z["caption_index"], [0, 1, 0, 0])
    assert s["splits"] == {"train": {"images": 3, "captions": 4}, "val": {"images": 1, "captions": 1}}
    assert s["vocab_size"] == 7 and s["vocab_words"] == 3 and s["train_distinct_words"] == 9
    assert s["train_tokens"] == 15 and s["train_token_coverage"] == round(9 / 15, 6)
    assert s["train_captions_truncated"] == 1 and s["train_captions_truncated_pct"] == 25.0
    assert s["train_caption_length"] == {"min": 2, "mean": 3.75, "median": 3.0, "p95": 6.4, "max": 7}
    assert json.loads((tmp_path / "out" / "prepare.json").read_text()) == s
    # the df sits next to the JSON under the name training's cache looks for
    refs = [r.captions for r in load_karpathy(small, "train")["train"]]
    df_path = small.parent / df_cache_name(small, "train", refs)
    assert s["files"]["cider_df"] == str(df_path) and df_path.exists()
    df = DocumentFrequency.load(df_path)
    assert df.num_docs == 3
    assert _as_dict(df) == _brute_force_df(TRAIN_CAPTIONS)
    # by hand: "a" is in all 3 train images, "a dog" in images 10 and 40, "runs fast" in image 10 only
    assert _as_dict(df)[("a",)] == 3 and _as_dict(df)[("a", "dog")] == 2 and _as_dict(df)[("runs", "fast")] == 1
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_df_name_matches_training_cache(small, tmp_path):
    from catcap.training.reward import cached_document_frequency

    refs = [r.captions for r in load_karpathy(small, "train")["train"]]
    assert len(references_fingerprint(refs)) == 12
    assert references_fingerprint(refs) != references_fingerprint(refs[:-1])
    s = prepare_dataset(small, tmp_path / "out", min_count=1)
    messages = []
    _, path = cached_document_frequency(refs, small, "train", tmp_path / "run", log=messages.append)
    assert str(path) == s["files"]["cider_df"] and messages == []  # found, not rebuilt


def test_prepare_errors(small, tmp_path):
    with pytest.raises(PrepareError, match="dataset file not found"):
        prepare_dataset(tmp_path / "none.json", tmp_path / "out")
    with pytest.raises(PrepareError, match=r"no images in the train split 'test'; the file has train \(3 images\), val"):
        prepare_dataset(small, tmp_path / "out", train_split="test")
    with pytest.raises(PrepareError, match="min_count must be an integer >= 1, found 0"):
        prepare_dataset(small, tmp_path / "out", min_count=0)
    with pytest.raises(PrepareError, match="max_len must be an integer >= 1"):
        prepare_dataset(small, tmp_path / "out", max_len="16")
    empty = _dataset(tmp_path / "empty.json", [(1, "train", ["a dog"]), (2, "train", ["..."]), (3, "val", [])])
    with pytest.raises(PrepareError, match=r"found 2 problem\(s\): image 2 \(2\.jpg, train\) caption 0 '\.\.\.' has no word; "
                                           r"image 3 \(3\.jpg, val\) has no caption"):
        prepare_dataset(empty, tmp_path / "out")
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(PrepareError, match="expected a Karpathy split file"):
        prepare_dataset(bad, tmp_path / "out")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(PrepareError, match="is a file; expected a folder"):
        prepare_dataset(small, tmp_path / "afile")


def test_prepare_real_flickr8k(tmp_path):
    if not (FLICKR8K / "Flickr8k.token.txt").exists():
        pytest.skip(f"the real Flickr8k is not at {FLICKR8K} (expected Flickr8k.token.txt and the split lists)")
    data = import_flickr8k(FLICKR8K / "Flickr8k.token.txt",
                           {"train": FLICKR8K / "Flickr_8k.trainImages.txt", "val": FLICKR8K / "Flickr_8k.devImages.txt"})
    path = write_dataset_json(tmp_path / "dataset_flickr8k.json", data)
    s = prepare_dataset(path, tmp_path / "prepared")  # its speed: benchmarks/flickr8k_data.py
    assert s["splits"] == {"train": {"images": 6000, "captions": 30000}, "val": {"images": 1000, "captions": 5000}}
    assert 2000 < s["vocab_size"] < 4000, s["vocab_size"]  # 2543 at min_count 5
    assert s["train_token_coverage"] > 0.95
    assert 3 < s["train_captions_truncated_pct"] < 15   # 7.37%
    splits = load_karpathy(path)
    assert {k: len(v) for k, v in splits.items()} == {"train": 6000, "val": 1000}
    z = load_captions(tmp_path / "prepared" / "captions.npz")
    assert z["ids"].shape == (30000, 18)
    vocab = Vocab.from_json(tmp_path / "prepared" / "vocab.json")
    first = splits["train"][0].captions[0]   # 17 words, one of them rarer than 5 times
    assert vocab.decode(z["ids"][0]) == [w if w in vocab else "<unk>" for w in first[:16]]
