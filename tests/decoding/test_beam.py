"""Batched beam search: hand-computed results on a scripted model, and cached == uncached
reference on the real Transformer decoder (DESIGN.md decoder contract)."""

import math

import pytest
import torch
from torch import nn

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
from catcap.decoding import beam_search, build_processors, greedy
from catcap.decoding.reference import reference_beam_search
from catcap.models.captioner import Captioner
from catcap.models.decoders.state import DecoderState
from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

PAD, BOS, EOS, A, B, C, D = range(7)


class ScriptedModel(nn.Module):
    """Implements the decoding protocol with fixed next-token probabilities per image and
    prefix: ``tables[image][prefix] = {token: p}`` (unlisted prefixes: ``<eos>`` with p = 1).
    The image id is ``features[b, 0, 0]``; it counts its ``step`` calls."""

    bos_id, eos_id, pad_id, vocab = BOS, EOS, PAD, 7

    def __init__(self, tables):
        super().__init__()
        self.tables, self.steps = tables, 0

    def row(self, image: int, prefix: tuple) -> torch.Tensor:
        out = torch.full((self.vocab,), float("-inf"))
        for token, p in self.tables[image].get(prefix, {EOS: 1.0}).items():
            out[token] = math.log(p)
        return out

    def encode(self, features, feature_mask):
        return features, feature_mask

    def init_state(self, memory, memory_mask, group=1):
        rows = memory.shape[0] * group
        return DecoderState(memory, memory_mask, group, 0, {"prefix": torch.zeros(rows, 0, dtype=torch.long)})

    def step(self, tokens, state):
        self.steps += 1
        prefix = state.caches["prefix"]
        if state.position == 0:
            assert bool((tokens == BOS).all())
        else:
            prefix = torch.cat([prefix, tokens[:, None]], dim=1)
        images = state.memory[:, 0, 0].long().repeat_interleave(state.group)
        logits = torch.stack([self.row(int(i), tuple(p.tolist())) for i, p in zip(images, prefix)])
        return logits, state.advanced({"prefix": prefix})

    def forward(self, features, feature_mask, captions, caption_mask):
        inputs = captions[:, :-1]
        rows = [[self.row(int(features[b, 0, 0]), tuple(inputs[b, 1:t + 1].tolist())) for t in range(inputs.shape[1])]
                for b in range(inputs.shape[0])]
        return torch.stack([torch.stack(r) for r in rows]), []


# Image 0: greedy takes "a" (0.5) then "c" (0.4): p(a c) = 0.2, but p(b) * p(eos | b) = 0.36.
GREEDY_TRAP = {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {A: 0.25, B: 0.35, C: 0.4}, (B,): {EOS: 0.9, A: 0.1}}
# Image 1: "a <eos>" (0.3) beats "b c d <eos>" (0.2916) on the raw sum; per token it loses.
EARLY_LATE = {(): {A: 0.5, B: 0.45, EOS: 0.05}, (A,): {EOS: 0.6, C: 0.4}, (B,): {C: 0.8, EOS: 0.2},
              (B, C): {D: 0.9, EOS: 0.1}, (B, C, D): {EOS: 0.9, A: 0.1}}


def scripted_batch(*images):
    features = torch.tensor([[[float(i)]] for i in images])
    return features, torch.ones(len(images), 1, dtype=torch.bool)


def scripted():
    return ScriptedModel({0: GREEDY_TRAP, 1: EARLY_LATE})


def test_beam_two_finds_the_sequence_greedy_misses():
    features, mask = scripted_batch(0)
    assert greedy(scripted(), features, mask, max_len=6).tokens.tolist() == [[A, C, EOS]]
    model = scripted()
    out = beam_search(model, features, mask, beam_size=2, max_len=6, num_return=2)
    assert out.tokens.tolist() == [[B, EOS, PAD], [A, C, EOS]]
    torch.testing.assert_close(out.log_probs, torch.tensor([math.log(0.36), math.log(0.2)]))
    assert out.lengths.tolist() == [2, 3]
    torch.testing.assert_close(out.token_log_probs[0], torch.tensor([math.log(0.4), math.log(0.9), 0.0]))
    assert model.steps == 3, "the pool is full and no open beam can improve it after step 2: stop early"


@pytest.mark.parametrize("alpha, expected, scores", [
    (0.0, [[A, EOS, PAD, PAD], [B, C, D, EOS]], [math.log(0.3), math.log(0.2916)]),
    (1.0, [[B, C, D, EOS], [A, C, EOS, PAD]], [math.log(0.2916) / 4, math.log(0.2) / 3]),
])
def test_length_penalty_chooses_between_early_and_late_eos(alpha, expected, scores):
    features, mask = scripted_batch(1)
    out = beam_search(scripted(), features, mask, beam_size=2, max_len=6, length_penalty=alpha, num_return=2)
    assert out.tokens.tolist() == expected
    torch.testing.assert_close(out.scores, torch.tensor(scores))
    torch.testing.assert_close(out.log_probs, out.token_log_probs.sum(1))


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_images_in_a_batch_do_not_interact(alpha):
    features, mask = scripted_batch(1, 0, 1)
    both = beam_search(scripted(), features, mask, beam_size=2, max_len=6, length_penalty=alpha, num_return=2)
    assert both.tokens.shape[0] == 6 and both.group == 2
    for b, image in enumerate([1, 0, 1]):
        alone = beam_search(scripted(), *scripted_batch(image), beam_size=2, max_len=6, length_penalty=alpha, num_return=2)
        width = alone.tokens.shape[1]
        assert both.tokens[2 * b:2 * b + 2, :width].tolist() == alone.tokens.tolist()
        torch.testing.assert_close(both.scores[2 * b:2 * b + 2], alone.scores)


def test_scripted_reference_agrees():
    features, mask = scripted_batch(0, 1)
    for alpha in (0.0, 1.0):
        out = beam_search(scripted(), features, mask, beam_size=2, max_len=6, length_penalty=alpha, num_return=2)
        ref = reference_beam_search(scripted(), features, mask, beam_size=2, max_len=6, length_penalty=alpha, num_return=2)
        assert out.tokens.tolist() == ref.tokens.tolist()
        torch.testing.assert_close(out.scores, ref.scores)


def test_max_len_closes_open_beams_with_eos():
    """At max_len only <eos> is allowed, scored with the model's own p(<eos>)."""
    table = {(): {A: 0.95, EOS: 0.05}, (A,): {A: 0.95, EOS: 0.05}, (A, A): {A: 0.5, EOS: 0.5}}
    features, mask = scripted_batch(0)
    out = beam_search(ScriptedModel({0: table}), features, mask, beam_size=2, max_len=2, num_return=2)
    assert out.tokens.tolist() == [[A, A, EOS], [EOS, PAD, PAD]]
    torch.testing.assert_close(out.log_probs, torch.tensor([math.log(0.95 ** 2 * 0.5), math.log(0.05)]))


# ---- the real Transformer decoder ------------------------------------------------------------



def make_model(seed: int = 0, eos_bias: float = 0.0, cross: str = "vanilla", arch: str = "transformer",
               **options) -> Captioner:
    """The tiny Transformer, or (arch="m2") M2 (``tiny_models``), with a bias on <eos>."""
    model = tiny_captioner(arch, cross, options, seed, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    with torch.no_grad():
        model.decoder.output.bias[EOS] += eos_bias  # captions of varied lengths from an untrained model
    return model


def regions(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(3, 5, F, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    features[~mask] = 100.0  # garbage in padded regions must be ignored
    return features, mask


@pytest.mark.parametrize("eos_bias", [0.0, 0.6])
@pytest.mark.parametrize("rules", [{}, {"min_len": 2, "no_repeat_ngram": 3, "suppress_ids": [PAD, BOS, 3]}])
def test_beam_size_one_is_greedy(eos_bias, rules):
    model, (features, mask) = make_model(eos_bias=eos_bias), regions()
    processors = build_processors(EOS, **rules)
    g = greedy(model, features, mask, max_len=10, processors=processors)
    b = beam_search(model, features, mask, beam_size=1, max_len=10, processors=processors)
    assert torch.equal(b.tokens, g.tokens) and torch.equal(b.lengths, g.lengths)
    torch.testing.assert_close(b.log_probs, g.log_probs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("eos_bias, rules", [
    (0.0, {}),
    (0.6, {}),
    (0.6, {"no_repeat_ngram": 3}),
    (0.8, {"min_len": 3, "bad_ending_ids": [4, 5, 6], "suppress_ids": [PAD, BOS]}),
])
def test_cached_beam_search_equals_reference(seed, alpha, eos_bias, rules):
    model, (features, mask) = make_model(seed, eos_bias), regions(seed + 10)
    kwargs = dict(beam_size=4, max_len=9, length_penalty=alpha, processors=build_processors(EOS, **rules), num_return=4)
    out = beam_search(model, features, mask, **kwargs)
    ref = reference_beam_search(model, features, mask, **kwargs)
    assert out.tokens.tolist() == ref.tokens.tolist()
    assert torch.equal(out.lengths, ref.lengths) and torch.equal(out.mask, ref.mask)
    torch.testing.assert_close(out.scores, ref.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.log_probs, ref.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.token_log_probs, ref.token_log_probs, rtol=0, atol=1e-5)
    ranked = out.scores.view(3, 4)
    assert bool((ranked[:, :-1] >= ranked[:, 1:]).all()), "hypotheses are ranked best first"


HISTORY_VARIANTS = [("caca", {}), ("caca", {"strategy": "ihc", "shared": False}), ("caca", {"strategy": "ohc"}),
                    ("light_caca", {}), ("light_caca", {"strategy": "ohc"})]
M2_VARIANTS = [("vanilla", {}), ("caca", {}), ("caca", {"placement": "gated"}), ("caca", {"shared": False}),
               ("caca", {"strategy": "ihc", "placement": "gated"}), ("light_caca", {})]


RECURRENT_VARIANTS = [("vanilla", {}), ("caca", {}), ("caca", {"strategy": "ihc", "shared": False}),
                      ("caca", {"strategy": "ohc"}), ("light_caca", {})]


@pytest.mark.parametrize("arch, cross, options", [("transformer", *v) for v in HISTORY_VARIANTS]
                         + [("m2", *v) for v in M2_VARIANTS]
                         + [(arch, *v) for arch in ("att2in", "updown", "lookback", "aoa") for v in RECURRENT_VARIANTS]
                         + [("vlp", "vanilla", {}), ("vlp_geometry", "vanilla", {})])
@pytest.mark.parametrize("seed, eos_bias, rules", [(0, 0.6, {}), (1, 0.8, {"no_repeat_ngram": 3, "min_len": 2})])
def test_beam_search_with_history_memory_equals_reference(arch, cross, options, seed, eos_bias, rules):
    """CACA's history memory (one per encoder level in M2) rides in the decoder state and is
    reordered with the beams, as do the LSTM states of the recurrent decoders; M2's per-image
    memory of every encoder level is never copied."""
    model, (features, mask) = make_model(seed, eos_bias, cross, arch, **options), regions(seed + 10)
    kwargs = dict(beam_size=4, max_len=9, length_penalty=1.0, processors=build_processors(EOS, **rules), num_return=4)
    out = beam_search(model, features, mask, **kwargs)
    ref = reference_beam_search(model, features, mask, **kwargs)
    assert out.tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(out.scores, ref.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.token_log_probs, ref.token_log_probs, rtol=0, atol=1e-5)
    g = greedy(model, features, mask, max_len=9, processors=kwargs["processors"])
    b = beam_search(model, features, mask, beam_size=1, max_len=9, processors=kwargs["processors"])
    assert torch.equal(b.tokens, g.tokens)


def test_output_rows_are_ranked_and_end_with_eos():
    model, (features, mask) = make_model(1, 0.6), regions()
    out = beam_search(model, features, mask, beam_size=5, max_len=8, num_return=3)
    assert out.tokens.shape[0] == 9
    scores = out.scores.view(3, 3)
    assert bool((scores[:, :-1] >= scores[:, 1:]).all())
    last = out.tokens.gather(1, (out.lengths - 1)[:, None])[:, 0]
    assert bool((last == EOS).all()) and int(out.lengths.max()) <= 9
    assert not bool((out.tokens[out.mask] == PAD).any())


def test_no_duplicate_hypotheses():
    model, (features, mask) = make_model(2, 0.6), regions()
    out = beam_search(model, features, mask, beam_size=5, max_len=8, num_return=5)
    for b in range(3):
        rows = {tuple(out.tokens[r, :int(out.lengths[r])].tolist()) for r in range(5 * b, 5 * b + 5)}
        assert len(rows) == 5


def test_bad_arguments_are_reported():
    model, (features, mask) = make_model(), regions()
    with pytest.raises(ValueError, match="num_return"):
        beam_search(model, features, mask, beam_size=2, num_return=3)
    with pytest.raises(ValueError, match="feature_mask"):
        beam_search(model, features, mask.long())


def test_first_step_runs_once_per_image_then_once_per_beam():
    """All K beams of an image start identical: the model's first step sees B rows, later steps B * K."""
    model, (features, mask) = make_model(3, 0.6, "caca"), regions()
    rows, step = [], model.step

    def counting_step(tokens, state):
        rows.append((tokens.shape[0], state.group))
        return step(tokens, state)

    model.step = counting_step
    out = beam_search(model, features, mask, beam_size=4, max_len=6, num_return=4)
    assert rows[0] == (3, 1) and all(r == (12, 4) for r in rows[1:]) and len(rows) > 1
    del model.step
    ref = reference_beam_search(model, features, mask, beam_size=4, max_len=6, num_return=4)
    assert out.tokens.tolist() == ref.tokens.tolist()
