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
