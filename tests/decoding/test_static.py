"""Static decoding (``generate(..., static=True)``): the same captions as the default loop, bit
for bit on CPU fp32, for every decoder x cross-attention variant of the contract and every
strategy; no value read back to the host inside the loop; rule violations raised after it."""

import pytest
import torch

from catcap.decoding import GenerationConfig, generate
from catcap.decoding.generate import decode, strategy
from catcap.decoding.processors import build_processors
from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS, contract_batch, ending_captioner

EOS = 2
CONFIGS = {
    "greedy": GenerationConfig(num_beams=1, max_length=7),
    "sample": GenerationConfig(do_sample=True, num_return_sequences=2, seed=3, top_k=8, max_length=7),
    "beam": GenerationConfig(num_beams=3, max_length=7, length_penalty=1.0, num_return_sequences=2),
    "diverse_beam": GenerationConfig(num_beams=4, num_beam_groups=2, diversity_penalty=0.5, max_length=7),
}
FIELDS = ("tokens", "log_probs", "lengths", "token_log_probs", "mask", "scores")


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("variant", CONTRACT_VARIANTS, ids=CONTRACT_IDS)
def test_static_decoding_gives_the_default_captions_bit_for_bit(variant, name):
    model, (features, fmask, _, _) = ending_captioner(variant), contract_batch()
    rules = build_processors(EOS, suppress_ids=[0, 1], no_repeat_ngram=2)
    with torch.no_grad():
        default = generate(model, features, fmask, CONFIGS[name], processors=rules)
        static = generate(model, features, fmask, CONFIGS[name], processors=rules, static=True)
    for field in FIELDS:
        assert torch.equal(getattr(static, field), getattr(default, field)), field


def test_the_batch_has_captions_that_end_before_others():
    """What the comparison above relies on: in a batch, some captions end steps before the
    longest, so the static loop runs steps past a finished row (Transformer + CACA, greedy)."""
    model, (features, fmask, _, _) = ending_captioner(("transformer", "caca", {})), contract_batch()
    with torch.no_grad():
        out = generate(model, features, fmask, GenerationConfig(num_beams=1, max_length=7), static=True)
    assert int(out.lengths.min()) < int(out.lengths.max())


class HostReads:
    """Every way a tensor's value reaches Python (``bool``, ``int``, ``float``, ``item``,
    ``tolist``, ``__index__``) raises while active."""

    NAMES = ("__bool__", "__int__", "__float__", "__index__", "item", "tolist")

    def __init__(self, monkeypatch):
        def refuse(self, *args, **kwargs):
            raise AssertionError("a tensor value was read back to the host")
        for name in self.NAMES:
            monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("arch, cross, options", [
    ("transformer", "caca", {}), ("m2", "caca", {"placement": "gated"}), ("m2_official", "light_caca", {}),
    ("updown", "caca", {}), ("lookback", "light_caca", {}), ("aoa", "caca", {}), ("vlp", "vanilla", {})])
def test_the_static_loop_reads_nothing_back(arch, cross, options, name, monkeypatch):
    """The whole static loop, encoder included, under a guard that fails on any host read;
    the default loop under the same guard fails (so the guard can fail)."""
    model, (features, fmask, _, _) = ending_captioner((arch, cross, options)), contract_batch()
    config, rules = CONFIGS[name], build_processors(EOS, suppress_ids=[0, 1], no_repeat_ngram=2, min_len=2)
    searches = [strategy(model, config, rules, 3, fmask, None, static) for static in (True, False)]
    with torch.no_grad():
        guard = monkeypatch.context()
        with guard as patch:
            HostReads(patch)
            decode(model, features, fmask, config.max_length, searches[0], None, static=True)
            with pytest.raises(AssertionError, match="read back to the host"):
                decode(model, features, fmask, config.max_length, searches[1], None, static=False)
    searches[0].output(None)


class ForbidAllAt:
    """A rule that forbids every token at one step."""

    def __init__(self, step):
        self.step = step

    def __call__(self, log_probs, history, step):
        return log_probs.masked_fill(torch.tensor(step == self.step), float("-inf"))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_rule_violation_is_raised_after_the_static_loop_as_at_its_step(name):
    model, (features, fmask, _, _) = ending_captioner(("transformer", "caca", {})), contract_batch()
    rule = ForbidAllAt(3)
    with torch.no_grad():
        with pytest.raises(ValueError) as default:
            generate(model, features, fmask, CONFIGS[name], processors=[rule])
        with pytest.raises(ValueError) as static:
            generate(model, features, fmask, CONFIGS[name], processors=[rule], static=True)
    assert str(static.value) == str(default.value) and "at step 3" in str(default.value)


def test_reserved_memories_are_allocated_once():
    """A static greedy decode of the Transformer + CACA writes every step into buffers made at
    the first step: their storage does not change from step 1 to the last."""
    model, (features, fmask, _, _) = ending_captioner(("transformer", "caca", {})), contract_batch()
    with torch.no_grad():
        state = model.init_state(*model.encode(features, fmask)).reserved(8)
        tokens = torch.full((3,), 1)
        pointers = []
        for _ in range(8):
            _, state = model.step(tokens, state)
            pointers.append([(c["self"].keys.k.data_ptr(), c["cross"].entries.k.data_ptr()) for c in state.caches])
    assert all(p == pointers[0] for p in pointers)
    with pytest.raises(ValueError, match="reserve a decoding memory before its first step"):
        state.reserved(8)
