"""VLP's VQA head and model: the head against its formula, padding kept out, the loss by hand."""

import math

import pytest
import torch

from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

from catcap.models.vqa import VLPQuestionAnswerer, VQAHead, vqa_loss


def test_head_is_an_mlp_on_the_product_of_cls_and_sep():
    torch.manual_seed(0)
    head = VQAHead(4, 3)
    cls, sep = torch.randn(2, 4), torch.randn(2, 4)
    w1, b1, w2, b2 = head.net[0].weight, head.net[0].bias, head.net[2].weight, head.net[2].bias
    expected = torch.relu((cls * sep) @ w1.T + b1) @ w2.T + b2
    torch.testing.assert_close(head(cls, sep), expected)


@torch.no_grad()
def test_answers_ignore_padded_regions_and_padded_question_tokens():
    tiny = tiny_captioner("vlp")
    model = VLPQuestionAnswerer(tiny.encoder, tiny.decoder, 5).eval()
    features = torch.randn(1, 3, F)
    question = torch.tensor([[7, 8, 2]])
    alone = model(features, torch.ones(1, 3, dtype=torch.bool), question, torch.ones(1, 3, dtype=torch.bool))
    padded_features = torch.cat([features, torch.full((1, 2, F), 1e3)], 1)
    padded_question = torch.tensor([[7, 8, 2, 0]])
    out = model(padded_features, torch.tensor([[1, 1, 1, 0, 0]], dtype=torch.bool), padded_question,
                torch.tensor([[1, 1, 1, 0]], dtype=torch.bool))
    torch.testing.assert_close(out, alone, rtol=1e-5, atol=1e-5)
    assert out.shape == (1, 5)


def test_loss_is_bce_summed_over_answers_and_averaged_over_questions():
    logits = torch.tensor([[0.0, 2.0], [-1.0, 0.5]])
    targets = torch.tensor([[1.0, 0.0], [1 / 3, 1.0]])

    def bce(x, y):
        p = 1 / (1 + math.exp(-x))
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    expected = (bce(0, 1) + bce(2, 0) + bce(-1, 1 / 3) + bce(0.5, 1)) / 2
    assert float(vqa_loss(logits, targets)) == pytest.approx(expected, rel=1e-6)
