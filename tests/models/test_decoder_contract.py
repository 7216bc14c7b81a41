"""The decoder contract (DESIGN.md): teacher-forced == cached steps; padded == unpadded;
caches move with hypotheses; in training mode, under the same dropout masks, no output depends
on a later word — for every decoder (the Transformer's over one encoder level, M2's
meshed one over every level of a memory-augmented encoder, the recurrent Att2in, Up-Down,
Look-Back and AoANet), every cross-attention variant and history strategy, and both placements of CACA's
history in the meshed decoder."""

import pytest
import torch

from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS
from tiny_models import VOCAB as V
from tiny_models import contract_batch as batch
from tiny_models import tiny_captioner

from catcap.models.caption_model import CaptionModel


VARIANTS, IDS = CONTRACT_VARIANTS, CONTRACT_IDS


def make_model(arch: str = "transformer", cross: str = "vanilla", options: dict | None = None, seed: int = 0) -> CaptionModel:
    return tiny_captioner(arch, cross, options, seed)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
@pytest.mark.parametrize("group", [1, 3])
def test_teacher_forced_equals_cached_steps(group, variant):
    model = make_model(*variant)
    features, fmask, captions, cmask = batch()
    with torch.no_grad():
        full, _ = model(features, fmask, captions, cmask)
        memory, mask = model.encode(features, fmask)
        state = model.init_state(memory, mask, group)
        steps = []
        for t in range(captions.shape[1] - 1):
            logits, state = model.step(captions[:, t].repeat_interleave(group), state)
            steps.append(logits.view(3, group, V))
    cached = torch.stack(steps, 2)  # (B, G, T-1, V)
    for g in range(group):
        for b in range(3):
            real = int(cmask[b].sum()) - 1
            torch.testing.assert_close(cached[b, g, :real], full[b, :real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_padding_changes_nothing(variant):
    model = make_model(*variant)
    features, fmask, captions, cmask = batch()
    with torch.no_grad():
        full, _ = model(features, fmask, captions, cmask)
        for b in range(3):
            n, t = int(fmask[b].sum()), int(cmask[b].sum())
            alone, _ = model(features[b:b + 1, :n], fmask[b:b + 1, :n], captions[b:b + 1, :t], cmask[b:b + 1, :t])
            torch.testing.assert_close(alone[0], full[b, :t - 1], rtol=1e-4, atol=1e-5)
            # garbage in padded regions is ignored
    noisy = features.clone()
    noisy[~fmask] = 1e3
    with torch.no_grad():
        torch.testing.assert_close(model(noisy, fmask, captions, cmask)[0], full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_reorder_moves_caches_with_hypotheses(variant):
    model = make_model(*variant)
    features, fmask, captions, _ = batch()
    with torch.no_grad():
        memory, mask = model.encode(features, fmask)
        state = model.init_state(memory, mask, 2)
        tokens = torch.tensor([1, 1, 1, 1, 1, 1])
        _, state = model.step(tokens, state)
        _, state = model.step(torch.tensor([5, 9, 6, 10, 7, 11]), state)
        swapped = state.reorder(torch.tensor([1, 0, 2, 3, 5, 4]))
        a, _ = model.step(torch.tensor([3, 3, 3, 3, 3, 3]), state)
        b, _ = model.step(torch.tensor([3, 3, 3, 3, 3, 3]), swapped)
    torch.testing.assert_close(b[[1, 0, 2, 3, 5, 4]], a)
    assert not torch.allclose(a[0], a[1])


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_reorder_can_grow_the_group(variant):
    """A one-hypothesis-per-image state copied to K rows each (beam search's first step)
    continues exactly like a state started with K rows per image."""
    model = make_model(*variant)
    features, fmask, _, _ = batch()
    with torch.no_grad():
        memory, mask = model.encode(features, fmask)
        one = model.init_state(memory, mask, 1)
        _, one = model.step(torch.tensor([1, 1, 1]), one)
        grown = one.reorder(torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2]), group=3)
        three = model.init_state(memory, mask, 3)
        _, three = model.step(torch.tensor([1] * 9), three)
        tokens = torch.tensor([5, 6, 7, 8, 9, 10, 11, 5, 6])
        a, _ = model.step(tokens, grown)
        b, _ = model.step(tokens, three)
        with pytest.raises(ValueError, match="reorder needs 3 images x 3 hypotheses = 9 indices, got 6"):
            one.reorder(torch.tensor([0, 0, 1, 1, 2, 2]), group=3)
    assert grown.group == 3
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
def test_grouped_teacher_forcing_equals_repeated_memory(variant):
    """decoder(tokens of G captions per image, memory once per image, group=G) ==
    decoder(same tokens, memory repeated per caption): what SCST's scoring pass relies on."""
    model = make_model(*variant)
    features, fmask, _, _ = batch()
    g = 2
    captions, cmask = grouped_captions()
    with torch.no_grad():
        memory, mmask = model.encode(features, fmask)
        grouped, gx = model.decoder(captions, cmask, memory, mmask, group=g)
        repeated, rx = model.decoder(captions, cmask, memory.repeat_interleave(g, 0), mmask.repeat_interleave(g, 0))
    torch.testing.assert_close(grouped[cmask], repeated[cmask], rtol=1e-5, atol=1e-5)
    for a, b in zip(gx, rx):
        if a:
            real = cmask[:, None, :].expand_as(a["history_weight"])
            torch.testing.assert_close(a["history_weight"][real], b["history_weight"][real], rtol=1e-5, atol=1e-6)


def grouped_captions():
    """Two captions per image of ``batch()`` (6 rows, image-major), padded."""
    captions = torch.tensor([[1, 5, 6, 7, 2], [1, 9, 2, 0, 0], [1, 4, 4, 2, 0], [1, 8, 2, 0, 0], [1, 3, 5, 6, 2],
                             [1, 7, 2, 0, 0]])
    return captions, captions != 0


FIRST_CHANGED = 2  # the position from which ``with_future_changed`` rewrites the captions


def with_future_changed(captions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same captions with every real token from position FIRST_CHANGED on replaced by another
    word (same shape and mask, so the same dropout masks are drawn for the same seed)."""
    changed = captions.clone()
    later = mask.clone()
    later[:, :FIRST_CHANGED] = False
    changed[later] = (captions[later] - 3 + 7) % (V - 4) + 4  # another word id in 4..V-1
    assert bool((changed[later] != captions[later]).all())
    return changed


@pytest.mark.parametrize("variant", VARIANTS, ids=IDS)
@pytest.mark.parametrize("group", [1, 2])
def test_training_mode_with_dropout_cannot_see_future_words(variant, group):
    """In training mode (dropout on every layer, attention dropout on the weights over regions
    and history in CACA / LightCACA), under the same dropout masks (same seed, same shapes), the
    outputs at positions before FIRST_CHANGED do not move when later words change, while later
    outputs do; a different seed changes the outputs (the dropout path really runs)."""
    model = make_model(*variant).train()
    features, fmask, _, _ = batch()
    captions, cmask = grouped_captions() if group == 2 else batch()[2:]
    changed = with_future_changed(captions, cmask)

    def run(tokens, seed):
        torch.manual_seed(seed)
        memory, mmask = model.encode(features, fmask)
        logits, _ = model.decoder(tokens, cmask, memory, mmask, group=group)
        return logits

    with torch.no_grad():
        a, b, other_seed = run(captions, 5), run(changed, 5), run(captions, 6)
    past = cmask.clone()
    past[:, FIRST_CHANGED:] = False
    future = cmask & ~past
    torch.testing.assert_close(a[past], b[past], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(a[future], b[future], atol=1e-4), "later outputs must see the changed words"
    assert not torch.allclose(a[cmask], other_seed[cmask], atol=1e-4), "dropout is not active in training mode"
