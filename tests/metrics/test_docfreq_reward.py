"""Precomputed document frequencies and the fast CIDEr-D reward for self-critical training."""

import numpy as np
import pytest
from pycocoevalcap.cider.cider_scorer import CiderScorer

from catcap.metrics.cider import CiderD, cider_d
from catcap.metrics.docfreq import DocumentFrequency
from catcap.metrics.errors import MetricInputError
from catcap.metrics.ngrams import count_caption_set


@pytest.fixture(scope="module")
def corpus(coco_sample):
    refs = [[c.lower().replace(".", " ").split() for c in img["captions"][:5]] for img in coco_sample]
    return refs


def test_reward_equals_toolkit_formula_with_training_df(corpus):
    train, batch = corpus[:1500], corpus[1500:1550]
    df = DocumentFrequency.from_references(train)
    cands = [refs[j % 5] for refs in batch for j in range(6)]  # 6 candidates per image
    cand_image = np.repeat(np.arange(len(batch)), 6)
    rewards = CiderD(df)(cands, batch, cand_image)
    # oracle: the toolkit's scorer with its df table replaced by the training one; padding
    # crefs to |D| entries makes it use log|D| of the training set (zip scores only the real ones)
    train_scorer = CiderScorer(n=4, sigma=6.0)
    for r in train:
        train_scorer += (None, [" ".join(s) for s in r])
    train_scorer.compute_doc_freq()
    oracle = CiderScorer(n=4, sigma=6.0)
    for c, i in zip(cands, cand_image):
        oracle += (" ".join(c), [" ".join(s) for s in batch[i]])
    oracle.crefs += [[]] * (len(train) - len(oracle.crefs))
    oracle.document_frequency = train_scorer.document_frequency
    expected = oracle.compute_cider()
    np.testing.assert_allclose(rewards, expected, rtol=0, atol=1e-9)


def test_reward_with_own_df_equals_evaluation(corpus):
    refs = corpus[:300]
    cands = [r[0] for r in corpus[300:600]]
    df = DocumentFrequency.from_references(refs)
    np.testing.assert_allclose(CiderD(df)(cands, refs), cider_d(count_caption_set(cands, refs))[1], atol=1e-12)


def test_token_ids_and_words_give_the_same_rewards(corpus):
    vocab = {w: i for i, w in enumerate(sorted({w for r in corpus for s in r for w in s}), start=4)}
    to_ids = lambda s: [vocab[w] for w in s]  # noqa: E731
    train, batch = corpus[:500], corpus[500:520]
    cands = [r[1] for r in batch]
    words = CiderD(DocumentFrequency.from_references(train))(cands, batch)
    ids = CiderD(DocumentFrequency.from_references([[to_ids(s) for s in r] for r in train]))(
        [to_ids(c) for c in cands], [[to_ids(s) for s in r] for r in batch])
    np.testing.assert_allclose(words, ids, atol=1e-12)


def test_save_load_roundtrip_without_pickle(tmp_path, corpus):
    df = DocumentFrequency.from_references(corpus[:200])
    path = tmp_path / "df.npz"
    df.save(path)
    back = DocumentFrequency.load(path)
    assert back.num_docs == 200 and back.words == df.words
    for a, b in zip(df.df, back.df):
        np.testing.assert_array_equal(a, b)
    batch = corpus[200:210]
    np.testing.assert_array_equal(CiderD(df)([r[0] for r in batch], batch), CiderD(back)([r[0] for r in batch], batch))
    assert not list(tmp_path.glob("*.tmp"))


def test_lookup_counts_documents_not_occurrences():
    df = DocumentFrequency.from_references([[["a", "a", "b"], ["a", "c"]], [["b", "a"]], [["d"]]])
    words = [None, "a", "b", "zz", "c"]  # batch ids: words[0] is the unused placeholder
    grams = np.array([[1, 0], [2, 0], [3, 0], [1, 2], [2, 1], [4, 0], [1, 1]])
    order = np.array([1, 1, 1, 2, 2, 1, 2])
    got = DocumentFrequency.lookup(df, words, grams, order).tolist()
    assert got == [2, 2, 0, 1, 1, 1, 1]  # 'a' in 2 images, 'zz' unseen, 'a a' once


def test_mixed_token_kinds_are_rejected(corpus):
    df = DocumentFrequency.from_references(corpus[:10])
    with pytest.raises(MetricInputError, match="built from str tokens"):
        CiderD(df)([[1, 2, 3]], [[[1, 2]]])


def test_bad_files_are_rejected(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, format=np.array("something-else"))
    with pytest.raises(MetricInputError, match="expected a catcap-docfreq-v1 file"):
        DocumentFrequency.load(bad)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, format=np.array("catcap-docfreq-v1"), words=np.array([{"a": 1}], dtype=object))
    with pytest.raises(MetricInputError, match="not a readable"):
        DocumentFrequency.load(pickled)
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(MetricInputError):
        DocumentFrequency.load(tmp_path / "text.npz")
