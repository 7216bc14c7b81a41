"""catcap's rules as MaskingProcessors: called, they return a masked copy and leave their input
alone; beam search masks the beams' summed scores in place with them, and that gives exactly the
result of the same rules run as plain (copying) processors."""

import torch

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
from catcap.decoding import beam_search, build_processors
from catcap.decoding.processors import MaskingProcessor, MinLength, NoRepeatNGram, SuppressTokens
from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

PAD, BOS, EOS = 0, 1, 2


def test_a_masking_rule_returns_a_masked_copy_and_masks_in_place_on_request():
    scores = torch.zeros(2, 6)
    history = torch.tensor([[3, 4, 3], [5, 5, 5]])
    rule = NoRepeatNGram(2)  # row 0 must not say 4 after 3 again; row 1 not 5 after 5
    out = rule(scores, history, 3)
    assert torch.equal(scores, torch.zeros(2, 6)), "calling a rule must not touch its input"
    assert out[0, 4] == float("-inf") and out[1, 5] == float("-inf") and torch.isfinite(out).sum() == 10
    rule.mask(scores, history, 3)
    assert torch.equal(scores, out)
    assert MinLength(2, EOS)(scores, history, 3) is scores  # nothing to do: no copy
    assert SuppressTokens([])(scores, history, 0) is scores


class Plain:
    """The same rules as ordinary processors (not MaskingProcessors): beam search copies for them."""

    def __init__(self, rules):
        self.rules = rules

    def __call__(self, log_probs, history, step):
        for rule in self.rules:
            log_probs = rule(log_probs, history, step)
        return log_probs


def test_beam_search_masks_the_sums_in_place_exactly_as_the_copying_path():
    model = tiny_captioner(bos_id=BOS, eos_id=EOS, pad_id=PAD)
    torch.manual_seed(1)
    features, mask = torch.randn(3, 5, F), torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    rules = build_processors(EOS, min_len=3, no_repeat_ngram=2, suppress_ids=[PAD, BOS], bad_ending_ids=[4, 5])
    assert all(isinstance(r, MaskingProcessor) for r in rules)
    with torch.no_grad():
        fast = beam_search(model, features, mask, beam_size=3, max_len=7, processors=rules, num_return=3)
        slow = beam_search(model, features, mask, beam_size=3, max_len=7, processors=(Plain(rules),), num_return=3)
    for name in ("tokens", "log_probs", "scores", "lengths", "token_log_probs", "mask"):
        assert torch.equal(getattr(fast, name), getattr(slow, name)), name
