"""CACA in one pass per step: every shared-weight CACA variant scores the regions once per step
(the final pass reuses the first pass's region scores, combined with the history block through
their log-sum-exps) and gives the numbers of the literal two-pass computation: a first softmax
over the regions, then a second, fresh softmax over the concatenation [regions; history].

The literal computation is written here, outside the library: :func:`literal_passes` replaces
:meth:`ContextAssist._passes` for the reference run. The Transformer, M2 and AoANet families'
final pass over the concatenation is ``attend_with_history`` (one softmax over both blocks, the
path training with attention dropout takes); the recurrent family's is written out below."""

import pytest
import torch

from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.history import HistoryAttention
from catcap.models.cross.soft import SoftAttention
from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS, contract_batch, tiny_captioner

#: every contract variant with a shared-weight CACA history: where one pass per step applies
ONE_PASS = [(v, i) for v, i in zip(CONTRACT_VARIANTS, CONTRACT_IDS)
            if v[1] == "caca" and v[2].get("shared", True)]
STEPS, GROUP = 6, 2


def literal_final(att, q, query, prepared, memory_mask, history, mask, group, assist):
    """The second pass as a fresh softmax over [regions; history] (regions scored again)."""
    if not isinstance(att, SoftAttention):
        return att.final_pass(q, query, None, prepared, memory_mask, history, mask, group, assist)
    score = att._score(final=True)
    blocks, values = [], []
    if assist.regions_in_final:
        e_x = score.regions(query, prepared.keys, memory_mask)  # (R, N), -inf at padded regions
        blocks.append(e_x)
        values.append(prepared.values.repeat_interleave(group, 0))  # (R, N, D)
    if history is not None:
        blocks.append(score.entries(query, history.keys))
        values.append(history.values)
    alpha = torch.cat(blocks, -1).softmax(-1)
    return (alpha[:, None] @ torch.cat(values, 1))[:, 0], {}


def literal_passes(self, att, q, prepared, memory_mask, group, history_of, mask):
    """CACA's two passes written literally: softmax over the regions, the entry, then the final pass anew."""
    query = att.query(q)
    first = att.first_pass(query, prepared, memory_mask, group, keep=True)
    history = history_of(att.context_entry(q, query, first, prepared, group, self))
    return literal_final(att, q, query, prepared, memory_mask, history, mask, group, self)


def step_logits(model, tokens):
    """Cached decoding fed ``tokens`` (B*G, STEPS): the logits of every step (B*G, STEPS, V)."""
    features, fmask, _, _ = contract_batch()
    state = model.init_state(*model.encode(features, fmask), GROUP)
    out = []
    for t in range(STEPS):
        logits, state = model.step(tokens[:, t], state)
        out.append(logits)
    return torch.stack(out, 1)


class Counter:
    """Counts calls of the functions that score the regions (a pass over the regions)."""

    def __init__(self, monkeypatch):
        import catcap.models.cross.aoa as aoa
        import catcap.models.cross.history as history
        import catcap.models.cross.soft as soft
        import catcap.models.cross.transformer as transformer
        self.calls = 0
        for module in (aoa, transformer):
            for name in ("attend_regions", "attend_with_history"):
                monkeypatch.setattr(module, name, self.wrap(getattr(history, name), name))
        monkeypatch.setattr(soft.AdditiveScore, "regions", self.wrap(soft.AdditiveScore.regions, "regions"))

    def wrap(self, fn, name):
        def counted(*args, **kwargs):
            regions = args[1] if name == "attend_with_history" else True
            self.calls += regions is not None
            return fn(*args, **kwargs)
        return counted


@pytest.mark.parametrize("variant", [v for v, _ in ONE_PASS], ids=[i for _, i in ONE_PASS])
def test_one_pass_equals_the_literal_two_pass_step(variant, monkeypatch):
    """Same logits as the literal two passes at every step (fp32, ~1e-6), with the regions
    scored once per layer and step instead of twice (OHC's final pass reads no regions: once either way)."""
    model = tiny_captioner(*variant)
    tokens = torch.randint(3, 30, (3 * GROUP, STEPS), generator=torch.Generator().manual_seed(4))
    tokens[:, 0] = model.bos_id
    layers = len(getattr(model.decoder, "layers", [None]))
    with torch.no_grad():
        count = Counter(monkeypatch)
        one_pass = step_logits(model, tokens)
        one_pass_calls = count.calls
        monkeypatch.setattr(ContextAssist, "_passes", literal_passes)
        count.calls = 0
        literal = step_logits(model, tokens)
        literal_calls = count.calls
    torch.testing.assert_close(one_pass, literal, rtol=1e-6, atol=2e-6)
    assert one_pass_calls == STEPS * layers
    assert literal_calls == STEPS * layers * (1 if variant[2].get("strategy") == "ohc" else 2)


def test_literal_reference_catches_a_wrong_history_weight(monkeypatch):
    """The comparison can fail: a one-pass step whose history weight is off by 1% is caught."""
    import catcap.models.cross.history as history
    import catcap.models.cross.transformer as transformer

    def skewed(*args, **kwargs):
        out = history.attend_after_regions(*args, **kwargs)
        return HistoryAttention(out.heads * 1.01, out.region_weights, out.history_weights, out.history_weight)

    model = tiny_captioner("transformer", "caca", {})
    tokens = torch.randint(3, 30, (3 * GROUP, STEPS), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        monkeypatch.setattr(transformer, "attend_after_regions", skewed)
        wrong = step_logits(model, tokens)
        monkeypatch.setattr(ContextAssist, "_passes", literal_passes)
        literal = step_logits(model, tokens)
    assert not torch.allclose(wrong, literal, rtol=1e-6, atol=2e-6)
