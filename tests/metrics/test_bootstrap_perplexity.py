"""Paired bootstrap and perplexity.

Oracles: for the bootstrap, a brute-force reference on three images: all 3 ** 3 = 27 equally
likely resamples are enumerated and each is scored with pycocoevalcap itself (corpus BLEU
recomputed on the resampled image list, ROUGE-L and CIDEr-D as means of pycocoevalcap's
per-image scores with the full set's document frequencies), giving the exact distribution of
B - A; on 400 COCO images, properties that must hold (identical systems, a clearly worse one).
Perplexity is checked against exp(-mean log p) computed by hand.
"""

import itertools

import numpy as np
import pytest

from catcap.metrics.bootstrap import _resampled, format_comparison, paired_bootstrap
from catcap.metrics.errors import MetricInputError
from catcap.metrics.evaluate import evaluate_tokenized
from catcap.metrics.perplexity import perplexity, perplexity_from_nll

METRICS = ("bleu", "rouge", "cider")


@pytest.fixture(scope="module")
def systems(coco_sample):
    imgs = coco_sample[:400]
    ids = [img["image_id"] for img in imgs]
    refs = [[c.lower().replace(".", "").split() for c in img["captions"][1:]] for img in imgs]
    human = [img["captions"][0].lower().replace(".", "").split() for img in imgs]
    generic = [["a", "picture", "of", "something"] for _ in imgs]
    return (evaluate_tokenized(ids, human, refs, METRICS), evaluate_tokenized(ids, generic, refs, METRICS))


def test_identical_systems_have_zero_difference(systems):
    human, _ = systems
    for row in paired_bootstrap(human, human, resamples=200):
        assert row.diff == 0 and row.low == 0 and row.high == 0
        assert row.p_value == 1.0


def test_clearly_worse_system_is_significant(systems):
    human, generic = systems
    rows = {r.metric: r for r in paired_bootstrap(human, generic, resamples=500, seed=1)}
    for name in ("Bleu_4", "ROUGE_L", "CIDEr"):
        r = rows[name]
        assert r.diff < 0 and r.high < 0 and r.low <= r.diff <= r.high
        assert r.p_value < 0.01
    assert "CIDEr" in format_comparison(list(rows.values()))


def test_resampled_bleu_is_exact_corpus_bleu(systems):
    human, _ = systems
    identity = np.arange(len(human.image_ids))[None, :]
    assert _resampled(human, "Bleu_4", identity)[0] == pytest.approx(human.corpus["Bleu_4"], abs=1e-12)
    assert _resampled(human, "CIDEr", identity)[0] == pytest.approx(human.corpus["CIDEr"], abs=1e-12)


def test_results_must_cover_the_same_images(systems):
    human, generic = systems
    generic.image_ids = list(reversed(generic.image_ids))
    try:
        with pytest.raises(MetricInputError, match="same images"):
            paired_bootstrap(human, generic)
    finally:
        generic.image_ids = list(reversed(generic.image_ids))


# three images, three references each; B is better on images 0 and 1, worse on image 2
REFS = [["a dog runs on the grass", "a brown dog running on grass", "a dog playing outside"],
        ["two cats sleeping on a sofa", "cats asleep on a couch", "two cats on a red sofa"],
        ["a red car parked on the street", "a car on the street", "a small red car parked"]]
SYSTEM_A = ["a dog on the grass", "a cat on a bed", "a car parked on the street"]
SYSTEM_B = ["a brown dog runs on the grass", "two cats on a sofa", "a bus on a road"]
NAMES = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr")


def toolkit_differences() -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """pycocoevalcap's B - A on the three images, and on each of the 27 resamples (the exact
    bootstrap distribution: every image tuple with replacement is equally likely)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    images = range(len(REFS))
    systems = {"A": SYSTEM_A, "B": SYSTEM_B}
    gts = {i: REFS[i] for i in images}
    per_image = {name: {label: scorer.compute_score(gts, {i: [captions[i]] for i in images})[1]
                        for label, captions in systems.items()}
                 for name, scorer in (("ROUGE_L", Rouge()), ("CIDEr", Cider()))}

    def corpus(label, draw):
        bleu, _ = Bleu(4).compute_score({n: REFS[i] for n, i in enumerate(draw)},
                                        {n: [systems[label][i]] for n, i in enumerate(draw)}, verbose=0)
        scores = dict(zip(NAMES[:4], bleu))
        scores.update({name: float(np.mean(per_image[name][label][list(draw)])) for name in ("ROUGE_L", "CIDEr")})
        return scores

    def difference(draw):
        a, b = corpus("A", draw), corpus("B", draw)
        return {n: b[n] - a[n] for n in NAMES}

    draws = [difference(d) for d in itertools.product(images, repeat=len(REFS))]
    return difference(tuple(images)), {n: np.array([d[n] for d in draws]) for n in NAMES}


def test_paired_bootstrap_against_the_exact_distribution_of_the_toolkits_scores():
    """Each of the 27 resamples has probability 1/27 > 2.5%, so the 95% percentile interval of
    the exact distribution is [its minimum, its maximum]: 20,000 resamples must find exactly
    those (the smallest and largest draws come up ~740 times each, the 2.5% cut is at 500).
    The p-value 2 * min(P(d <= 0), P(d >= 0)) is an estimate: within 0.025 (3.5 standard errors)."""
    tokens = [[r.split() for r in refs] for refs in REFS]
    a = evaluate_tokenized([0, 1, 2], [c.split() for c in SYSTEM_A], tokens, METRICS)
    b = evaluate_tokenized([0, 1, 2], [c.split() for c in SYSTEM_B], tokens, METRICS)
    observed, exact = toolkit_differences()
    rows = {r.metric: r for r in paired_bootstrap(a, b, resamples=20000, seed=0)}
    assert set(rows) == set(NAMES)
    for name in NAMES:
        d, row = exact[name], rows[name]
        assert row.diff == pytest.approx(observed[name], abs=1e-9), name
        assert (row.low, row.high) == pytest.approx((d.min(), d.max()), abs=1e-9), name
        p = min(1.0, 2 * min(np.mean(d <= 0), np.mean(d >= 0)))
        assert row.p_value == pytest.approx(p, abs=0.025), name
        assert 0 < row.p_value <= 1


def test_perplexity():
    lp = np.log(np.array([[0.5, 0.25, 1.0], [0.5, 0.1, 0.1]]))
    mask = np.array([[True, True, False], [True, False, False]])
    expected = np.exp(-(np.log(0.5) + np.log(0.25) + np.log(0.5)) / 3)
    assert perplexity(lp, mask) == pytest.approx(expected)
    assert perplexity(np.log(np.full(10, 0.2))) == pytest.approx(5.0)
    assert perplexity_from_nll(0.0, 3) == 1.0
    with pytest.raises(MetricInputError, match="positive values"):
        perplexity(np.array([0.5, -1.0]))
    with pytest.raises(MetricInputError, match="all False"):
        perplexity(lp, np.zeros_like(mask))
    with pytest.raises(MetricInputError, match="shape"):
        perplexity(lp, mask[:1])


def test_perplexity_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    lp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 1.0]]))
    assert perplexity(lp, torch.tensor([[True, True], [True, False]])) == pytest.approx(np.exp(-(2 * np.log(0.5) + np.log(0.25)) / 3))
