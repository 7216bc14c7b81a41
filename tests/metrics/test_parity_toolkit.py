"""Parity of catcap.metrics with pycocoevalcap 1.2 on real COCO captions.

The fixture holds 2,000 COCO val2014 images; for each, human caption 0 is the candidate and
the remaining 4-6 captions are the references (so reference counts vary, as in COCO).
Both toolkits get the same tokens; scores must agree within 1e-9, corpus and per image.
"""

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from catcap.metrics.bleu import bleu
from catcap.metrics.cider import cider_d
from catcap.metrics.ngrams import count_caption_set
from catcap.metrics.rouge import rouge_l
from catcap.metrics.tokenizer import ptb_tokenize

TOL = 1e-9


@pytest.fixture(scope="module")
def tokenized(coco_sample):
    cands = [ptb_tokenize(img["captions"][0]) for img in coco_sample]
    refs = [[ptb_tokenize(c) for c in img["captions"][1:]] for img in coco_sample]
    gts = {i: [" ".join(r) for r in refs[i]] for i in range(len(refs))}
    res = {i: [" ".join(cands[i])] for i in range(len(cands))}
    return cands, refs, gts, res


def test_reference_counts_vary(tokenized):
    _, refs, _, _ = tokenized
    assert {len(r) for r in refs} >= {4, 5}


def test_bleu_matches_toolkit(tokenized):
    cands, refs, gts, res = tokenized
    ours = bleu(count_caption_set(cands, refs))
    corpus, per_image = Bleu(4).compute_score(gts, res, verbose=0)
    np.testing.assert_allclose(ours.corpus, corpus, rtol=0, atol=TOL)
    np.testing.assert_allclose(ours.per_image, np.array(per_image).T, rtol=0, atol=TOL)


def test_rouge_matches_toolkit(tokenized):
    cands, refs, gts, res = tokenized
    corpus, per_image = rouge_l(count_caption_set(cands, refs))
    ref_corpus, ref_per_image = Rouge().compute_score(gts, res)
    assert abs(corpus - ref_corpus) < TOL
    np.testing.assert_allclose(per_image, ref_per_image, rtol=0, atol=TOL)


def test_cider_d_matches_toolkit(tokenized):
    cands, refs, gts, res = tokenized
    corpus, per_image = cider_d(count_caption_set(cands, refs))
    ref_corpus, ref_per_image = Cider().compute_score(gts, res)
    assert abs(corpus - ref_corpus) < TOL
    np.testing.assert_allclose(per_image, ref_per_image, rtol=0, atol=TOL)


def test_subset_of_images_changes_cider_df_like_toolkit(tokenized):
    """df comes from the evaluated references: a 100-image subset scores differently."""
    cands, refs, gts, res = tokenized
    keys = list(range(100))
    corpus, _ = cider_d(count_caption_set(cands[:100], refs[:100]))
    ref_corpus, _ = Cider().compute_score({k: gts[k] for k in keys}, {k: res[k] for k in keys})
    full, _ = cider_d(count_caption_set(cands, refs))
    assert abs(corpus - ref_corpus) < TOL
    assert abs(corpus - full) > 1e-3
