"""Hand-made edge cases, each checked against pycocoevalcap's own scorers."""

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from catcap.metrics.bleu import bleu, bleu_from_stats, closest_ref_length
from catcap.metrics.cider import cider, cider_d
from catcap.metrics.ngrams import count_caption_set
from catcap.metrics.rouge import rouge_l

CASES = {
    "empty candidate": ("", ["a dog runs", "the dog is running"]),
    "one word": ("dog", ["a dog", "dog"]),
    "repeated words (clipping)": ("the the the the the the", ["the cat is on the mat", "there is a cat on the mat"]),
    "longer than 64 tokens": (" ".join(f"w{i % 30}" for i in range(70)), ["w1 w2 w3 w4", " ".join(f"w{i}" for i in range(40))]),
    "exact match": ("a man riding a horse", ["a man riding a horse", "a person on a horse"]),
    "seven references": ("a red bus", ["a bus"] * 3 + ["the red bus", "red bus on a street", "a big red bus", "bus"]),
    "empty reference": ("a cat", ["", "a small cat"]),
}


def toolkit(cases):
    gts = {i: refs for i, (_, refs) in enumerate(cases)}
    res = {i: [cand] for i, (cand, _) in enumerate(cases)}
    return gts, res


@pytest.fixture(scope="module")
def data():
    cases = list(CASES.values())
    cs = count_caption_set([c.split() for c, _ in cases], [[r.split() for r in refs] for _, refs in cases])
    return cs, *toolkit(cases)


def test_bleu_edge_cases(data):
    cs, gts, res = data
    ours = bleu(cs)
    corpus, per_image = Bleu(4).compute_score(gts, res, verbose=0)
    np.testing.assert_allclose(ours.corpus, corpus, atol=1e-12)
    np.testing.assert_allclose(ours.per_image, np.array(per_image).T, atol=1e-12)


def test_rouge_edge_cases(data):
    cs, gts, res = data
    corpus, per_image = rouge_l(cs)
    ref_corpus, ref_per_image = Rouge().compute_score(gts, res)
    np.testing.assert_allclose(per_image, ref_per_image, atol=1e-12)
    assert abs(corpus - ref_corpus) < 1e-12


def test_rouge_both_empty_counts_as_a_match():
    """The toolkit splits on ' ', so '' vs '' is one matching empty token: score 1."""
    cs = count_caption_set([[]], [[[], ["a", "dog"]]])
    assert rouge_l(cs)[1][0] == pytest.approx(Rouge().calc_score([""], ["", "a dog"]))
    assert rouge_l(cs)[1][0] == pytest.approx(1.0)


def test_cider_d_edge_cases(data):
    cs, gts, res = data
    corpus, per_image = cider_d(cs)
    ref_corpus, ref_per_image = Cider().compute_score(gts, res)
    np.testing.assert_allclose(per_image, ref_per_image, atol=1e-12)
    assert per_image[0] == 0.0  # the empty candidate


def test_plain_cider_against_hand_computation():
    """Original CIDEr on a two-image corpus, computed by hand with the published formula."""
    cands = [["a", "b"], ["c"]]
    refs = [[["a", "b"]], [["c", "d"]]]
    corpus, per_image = cider(count_caption_set(cands, refs))
    # image 0: every n-gram of candidate and reference has df 1 of |D| = 2 -> idf log 2;
    # unigram vectors equal, bigram vectors equal: cos = 1 for n = 1, 2; 0 for n = 3, 4.
    assert per_image[0] == pytest.approx(10 * (1 + 1 + 0 + 0) / 4)
    # image 1: unigram 'c' vs {'c', 'd'}: cos = 1/sqrt(2); no bigram in the candidate.
    assert per_image[1] == pytest.approx(10 * (1 / np.sqrt(2)) / 4)
    assert corpus == pytest.approx(per_image.mean())
    # CIDEr-D differs: it clips and penalises length (bigram counts 1 vs 0 for image 1)
    assert cider_d(count_caption_set(cands, refs))[1][1] < per_image[1]


def test_closest_reference_length_ties_to_shorter():
    got = closest_ref_length(np.array([5, 5, 3]), np.array([[4, 6, -1], [6, 4, 7], [9, -1, -1]]))
    assert got.tolist() == [4, 4, 9]


def test_bleu_brevity_penalty_only_below_ratio_one():
    stats = np.array([[10, 10, 10, 9, 8, 7, 10, 9, 8, 7], [10, 5, 10, 9, 8, 7, 10, 9, 8, 7]], float)
    scores = bleu_from_stats(stats)
    assert scores[0, 0] == pytest.approx(1.0)
    assert scores[1, 0] == pytest.approx(1.0)  # longer than the reference: no penalty
    short = bleu_from_stats(np.array([5, 10, 5, 4, 3, 2, 5, 4, 3, 2], float))
    assert short[0] == pytest.approx(np.exp(1 - 10 / 5), rel=1e-9)


def test_huge_vocabulary_keeps_ngram_codes_exact():
    """60k distinct words force the overflow-safe path of n-gram coding; BLEU still exact."""
    words = [f"w{i}" for i in range(60000)]
    refs = [[words[i:i + 12]] for i in range(0, 60000, 12)]
    cands = [r[0][:6] + ["zzz"] + r[0][6:9] for r in refs]
    cs = count_caption_set(cands, refs)
    ours = bleu(cs)
    gts = {i: [" ".join(r[0])] for i, r in enumerate(refs)}
    res = {i: [" ".join(c)] for i, c in enumerate(cands)}
    corpus, _ = Bleu(4).compute_score(gts, res, verbose=0)
    np.testing.assert_allclose(ours.corpus, corpus, atol=1e-12)
