"""Batched beam search: hand-computed results on a scripted model, and cached == uncached
reference on the real Transformer decoder (DESIGN.md decoder contract).

Oracles: hypotheses, scores and stopping steps worked out by hand from the scripted tables; and
``catcap.decoding.reference``, an uncached per-image beam search that re-runs the whole prefix
for every step, never stops early, and has its own length penalty and decoding rules (it
imports none of the code under test)."""

import math

import pytest
import torch

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
from catcap.decoding import beam_search, build_processors, greedy
from catcap.decoding.beam import best_possible
from catcap.decoding.reference import reference_beam_search
from catcap.models.caption_model import CaptionModel
from scripted_models import ScriptedModel, scripted_batch
from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

PAD, BOS, EOS, A, B, C, D = range(7)
# Image 0: greedy takes "a" (0.5) then "c" (0.4): p(a c) = 0.2, but p(b) * p(eos | b) = 0.36.
GREEDY_TRAP = {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {A: 0.25, B: 0.35, C: 0.4}, (B,): {EOS: 0.9, A: 0.1}}
# Image 1: "a <eos>" (0.3) beats "b c d <eos>" (0.2916) on the raw sum; per token it loses.
EARLY_LATE = {(): {A: 0.5, B: 0.45, EOS: 0.05}, (A,): {EOS: 0.6, C: 0.4}, (B,): {C: 0.8, EOS: 0.2},
              (B, C): {D: 0.9, EOS: 0.1}, (B, C, D): {EOS: 0.9, A: 0.1}}


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


# Negative length penalty (alpha = -1: score = sum * length, short captions win). Step 0 pools
# "<eos>" (0.3, rank 1 < K = 2). Step 1 pools "b <eos>" (0.18, score 2 ln 0.18 = -3.43): the pool
# is full, but the open beam "a c" (sum ln 0.45) may still end at length 3 with a score up to
# 3 ln 0.45 = -2.40 > -3.43 (the bound for alpha < 0 takes the earliest <eos>; the latest, at
# length 6, would give 6 ln 0.45 = -4.79 and stop here, one step too early). Step 2 pools
# "a c <eos>" (3 ln 0.405 = -2.71), which replaces "b <eos>"; then no open beam can win: stop.
SHORT_WINS = {(): {A: 0.5, EOS: 0.3, B: 0.2}, (A,): {C: 0.9, EOS: 0.1}, (B,): {EOS: 0.9, D: 0.1},
              (A, C): {EOS: 0.9, D: 0.1}}


def test_a_negative_length_penalty_bounds_open_beams_by_their_earliest_end():
    model = ScriptedModel({0: SHORT_WINS})
    out = beam_search(model, *scripted_batch(0), beam_size=2, max_len=5, length_penalty=-1.0, num_return=2)
    assert out.tokens.tolist() == [[EOS, PAD, PAD], [A, C, EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.3) * 1, math.log(0.405) * 3]))
    assert model.steps == 3, "stopped after step 2, not at step 1 (too early) nor at max_len"
    ref = reference_beam_search(ScriptedModel({0: SHORT_WINS}), *scripted_batch(0), beam_size=2, max_len=5,
                                length_penalty=-1.0, num_return=2)
    assert ref.tokens.tolist() == out.tokens.tolist()


def test_the_best_possible_final_score_of_open_beams():
    """sum / length ** alpha at the most favourable length: the latest <eos> (L = max_len + 1)
    for alpha > 0, the earliest (the next token, length step + 2) for alpha < 0, the sum itself
    for alpha = 0 (log-probs <= 0: later tokens can only lower it)."""
    sums = torch.tensor([-2.0, -0.5])
    torch.testing.assert_close(best_possible(sums, step=1, max_len=5, alpha=0.0), sums)
    torch.testing.assert_close(best_possible(sums, step=1, max_len=5, alpha=1.0), sums / 6)
    torch.testing.assert_close(best_possible(sums, step=1, max_len=5, alpha=0.5), sums / 6 ** 0.5)
    torch.testing.assert_close(best_possible(sums, step=1, max_len=5, alpha=-1.0), sums * 3)
    torch.testing.assert_close(best_possible(sums, step=3, max_len=5, alpha=-0.5), sums * 5 ** 0.5)


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.5, 2.0])
@pytest.mark.parametrize("seed, eos_bias", [(0, 1.0), (0, 1.5), (1, 1.0)])
def test_early_stop_with_other_length_penalties_never_changes_the_answer(alpha, seed, eos_bias):
    """The reference never stops early; the cached search stops as soon as no open beam can
    win and must still give the same hypotheses. With alpha < 1 these cases stop well before
    max_len (steps counted), so the early-stop bound is what is checked; with alpha = 2 the bound
    (the sum over 13 ** 2) lets no search stop early, and only the answers are compared."""
    model, (features, mask) = make_model(seed, eos_bias), regions(seed + 10)
    steps, step = [], model.step
    model.step = lambda tokens, state: steps.append(1) or step(tokens, state)
    out = beam_search(model, features, mask, beam_size=3, max_len=12, length_penalty=alpha, num_return=3)
    del model.step
    ref = reference_beam_search(model, features, mask, beam_size=3, max_len=12, length_penalty=alpha, num_return=3)
    assert out.tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(out.scores, ref.scores, rtol=1e-6, atol=1e-5)  # |score| up to ~100 for alpha -1
    torch.testing.assert_close(out.log_probs, ref.log_probs, rtol=0, atol=1e-5)
    if alpha < 1:
        assert len(steps) < 10, f"expected an early stop, ran {len(steps)} of 13 steps"


def test_rules_that_forbid_every_continuation_are_an_error():
    """Image 0's model allows only "a", which the rules suppress: nothing is left for it (even
    though image 1 could go on), an error rather than a caption of -inf."""
    tables = {0: {(): {A: 1.0}}, 1: {(): {B: 1.0}}}
    processors = build_processors(EOS, suppress_ids=[A])
    with pytest.raises(ValueError, match="at step 0 the logit processors forbid every continuation of every beam"):
        beam_search(ScriptedModel(tables), *scripted_batch(1, 0), beam_size=2, max_len=4, processors=processors)
    with pytest.raises(ValueError, match="at step 0 the rules forbid every continuation"):
        reference_beam_search(ScriptedModel(tables), *scripted_batch(0), beam_size=2, max_len=4,
                              rules={"suppress_ids": [A]})


def test_a_search_whose_beams_run_out_keeps_the_captions_it_found():
    """Image 1's model allows one caption only, "b <eos>": after it no beam can go on. The search
    ends with that caption (as the reference does), not with an error about the rules (before
    the fix: "at step 2 the logit processors forbid every continuation"); asking for two captions
    is an error that says only one exists."""
    tables = {1: {(): {B: 1.0}}}
    processors = build_processors(EOS, suppress_ids=[A])
    out = beam_search(ScriptedModel(tables), *scripted_batch(1), beam_size=2, max_len=4, processors=processors)
    ref = reference_beam_search(ScriptedModel(tables), *scripted_batch(1), beam_size=2, max_len=4,
                                rules={"suppress_ids": [A]})
    assert out.tokens.tolist() == ref.tokens.tolist() == [[B, EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([0.0]))
    with pytest.raises(ValueError, match=r"allow only 1 caption\(s\) for some image, fewer than num_return=2"):
        beam_search(ScriptedModel(tables), *scripted_batch(1), beam_size=2, max_len=4, processors=processors,
                    num_return=2)


def test_a_beam_the_rules_stop_leaves_the_captions_already_finished():
    """The empty caption (p 0.4) finishes at step 0; the open beam "a" may only repeat "a",
    which no_repeat_ngram=1 forbids: the search ends with the empty caption alone, as the
    reference does (before the fix: an error about the rules)."""
    tables = {0: {(): {A: 0.6, EOS: 0.4}, (A,): {A: 1.0}}}
    out = beam_search(ScriptedModel(tables), *scripted_batch(0), beam_size=2, max_len=4,
                      processors=build_processors(EOS, no_repeat_ngram=1))
    ref = reference_beam_search(ScriptedModel(tables), *scripted_batch(0), beam_size=2, max_len=4,
                                rules={"no_repeat_ngram": 1})
    assert out.tokens.tolist() == ref.tokens.tolist() == [[EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.4)]))


# ---- the real Transformer decoder ------------------------------------------------------------



def make_model(seed: int = 0, eos_bias: float = 0.0, cross: str = "vanilla", arch: str = "transformer",
               **options) -> CaptionModel:
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
    kwargs = dict(beam_size=4, max_len=9, length_penalty=alpha, num_return=4)
    out = beam_search(model, features, mask, processors=build_processors(EOS, **rules), **kwargs)
    ref = reference_beam_search(model, features, mask, rules=rules, **kwargs)
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
    kwargs = dict(beam_size=4, max_len=9, length_penalty=1.0, num_return=4)
    processors = build_processors(EOS, **rules)
    out = beam_search(model, features, mask, processors=processors, **kwargs)
    ref = reference_beam_search(model, features, mask, rules=rules, **kwargs)
    assert out.tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(out.scores, ref.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.token_log_probs, ref.token_log_probs, rtol=0, atol=1e-5)
    g = greedy(model, features, mask, max_len=9, processors=processors)
    b = beam_search(model, features, mask, beam_size=1, max_len=9, processors=processors)
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
