"""The official M2 (m2_official.yaml) and its CACA (m2_official_caca.yaml): the presets, the
official initialisation, the paper's placement of CACA in post-norm sub-layers written out by
hand (parallel and step by step), and the options these sub-layers make meaningless. The
official function itself is checked against the official code in test_transplant_parity.py."""

import math
from pathlib import Path

import pytest
import torch
from test_m2 import D, H, L, N, mha, parallel_and_steps_equal, randomise_norms  # test_m2's sizes and hand-made MHA

from catcap.config import ConfigError, load_config
from catcap.models.builders import build_captioner
from catcap.models.config import HistoryConfig, ModelConfig
from catcap.models.cross.mix import MeshedGates
from catcap.models.cross.transformer import TransformerCrossAttention
from catcap.models.parts import model_name
from catcap.registry import CROSS_ATTENTION
from catcap.training.experiment import ExperimentConfig

CONFIGS = Path(__file__).parents[2] / "configs" / "models"


def test_the_presets_are_the_official_m2_and_its_caca():
    official = load_config(ExperimentConfig, CONFIGS / "m2_official.yaml")
    m = official.model
    assert (m.encoder, m.decoder, m.cross_attention, m.memory_slots, m.d_model, m.num_heads, m.encoder_layers,
            m.decoder_layers, m.d_ff, m.dropout, m.max_len) == ("m2", "m2", "vanilla", 40, 512, 8, 3, 3, 2048, 0.1, 54)
    model = build_captioner(m, 10000)
    dec, enc = model.decoder, model.encoder
    assert dec.output.bias is None and isinstance(dec.norm, torch.nn.Identity) and isinstance(enc.norm, torch.nn.Identity)
    assert dec.positions.table.shape == (55, 512) and "decoder.positions.table" in model.state_dict()
    assert all(layer.post_norm and layer.cross.post_norm and layer.cross.attn.dropout == 0.0 for layer in dec.layers)
    assert all(layer.post_norm and layer.attn.dropout == 0.0 for layer in enc.layers)
    assert all(isinstance(layer.cross.mix, MeshedGates) and layer.cross.mix.levels == 3 for layer in dec.layers)
    caca = load_config(ExperimentConfig, CONFIGS / "m2_official_caca.yaml")
    assert (caca.model.cross_attention, caca.model.history.placement, caca.model.history.shared,
            caca.train.awc.enabled) == ("caca", "per_level", True, True)
    with_caca = build_captioner(caca.model, 10000)
    assert sorted(with_caca.state_dict()) == sorted(model.state_dict())  # CACA adds no weights
    assert (model_name(m), model_name(caca.model)) == ("M2 (official)", "M2 (official) + CACA")


def test_the_official_initialisation():
    """Xavier-uniform matrices (the slots with the official (1, m, D) tensor's bound, the gates
    their (D, 2D) matrices'), zero attention biases, a frozen Xavier position table."""
    torch.manual_seed(0)
    cfg = ModelConfig(encoder="m2", decoder="m2", memory_slots=40, d_model=64, num_heads=4, d_ff=128,
                      feature_dim=32, max_len=20)
    model = build_captioner(cfg, 500)

    def within(t, bound):
        biggest = float(t.detach().abs().max())
        return 0.9 * bound < biggest <= bound

    slots = model.encoder.layers[0].slots
    assert within(slots.keys, math.sqrt(6 / (41 * 64))) and within(slots.values, math.sqrt(6 / (41 * 64)))
    assert within(model.decoder.embed.weight, math.sqrt(6 / (500 + 64)))
    assert within(model.decoder.positions.table, math.sqrt(6 / (21 + 64)))
    assert within(model.decoder.layers[0].cross.mix.query.weight, math.sqrt(6 / (3 * 64)))
    assert within(model.encoder.layers[1].ffn.net[0].weight, math.sqrt(6 / (64 + 128)))
    for attn in (model.encoder.layers[0].attn, model.decoder.layers[1].self_attn, model.decoder.layers[1].cross.attn):
        assert all(not p.bias.detach().any() for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj))
    assert model.decoder.layers[0].ffn.net[0].bias.detach().abs().max() > 0  # PyTorch's default, as the official
    assert not model.decoder.positions.table.requires_grad


def meshed_post_norm(mix, y, parts):
    """Mix(Y, [C_i]) = sum_i sigmoid(W_i [Y; C_i] + b_i) * C_i / sqrt(L), no residual."""
    total = 0
    for i, c in enumerate(parts):
        w = torch.cat([mix.query.weight[i * D:(i + 1) * D], mix.context[i].weight], dim=1)
        total = total + torch.sigmoid(torch.cat([y, c], -1) @ w.T + mix.query.bias[i * D:(i + 1) * D]) * c
    return total / math.sqrt(len(parts))


def spec_official_caca(module, y, levels, placement):
    """Step by step for one caption, the paper's CACA in the official post-norm sub-layer:
    per_level: c_tmp_i = LN(Y + MHA(Y, X_i)) joins level i's history, C_i = LN(Y + MHA(Y, [X_i;
    HCM_i])); gated: one history of Mix(Y, [c_tmp_i]); output Mix(Y, [C_i])."""
    memories = [[] for _ in range(L)] if placement == "per_level" else [[]]
    outputs, weights = [], []
    for t in range(y.shape[0]):
        y_t = y[t:t + 1]
        first = [module.norm(y_t + mha(module.attn, y_t, levels[i])[0]) for i in range(L)]
        if placement == "gated":
            memories[0].append(meshed_post_norm(module.mix, y_t, first))
        else:
            for i in range(L):
                memories[i].append(first[i])
        finals, a = [], []
        for i in range(L):
            memory = torch.cat(memories[i if len(memories) == L else 0])
            out, w = mha(module.attn, y_t, torch.cat([levels[i], memory]))
            finals.append(module.norm(y_t + out))
            a.append(w[:, 0, N:].sum(-1))
        outputs.append(meshed_post_norm(module.mix, y_t, finals))
        weights.append(torch.cat(a))
    return torch.cat(outputs), torch.stack(weights, 1)


@pytest.mark.parametrize("placement", ["per_level", "gated"])
def test_official_m2_caca_is_the_papers_placement_written_out(placement):
    torch.manual_seed(3)
    module = TransformerCrossAttention(D, H, 0.0, mix=MeshedGates(D, L), post_norm=True,
                                       history=CROSS_ATTENTION.get("caca")(placement=placement)).eval()
    randomise_norms(module)
    parallel_and_steps_equal(module, lambda y, levels: spec_official_caca(module, y, levels, placement))


def test_post_norm_histories_refuse_the_normalize_option():
    with pytest.raises(ConfigError, match="model.history.normalize=False has no effect with decoder 'm2': its "
                                          "post-norm sub-layers make every history entry"):
        ModelConfig(encoder="m2", decoder="m2", cross_attention="caca", history=HistoryConfig(normalize=False))
    ModelConfig(encoder="m2", decoder="m2", cross_attention="light_caca")  # the default is fine
