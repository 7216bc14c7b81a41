"""A captioning model whose next-token probabilities are a fixed table, for decoding tests whose
expected results are worked out by hand (importable as ``scripted_models``: tests/ is on
sys.path). Ids follow catcap's vocabulary: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2."""

import math

import torch
from torch import nn

from catcap.models.decoders.state import DecoderState

PAD, BOS, EOS = 0, 1, 2


class ScriptedModel(nn.Module):
    """Implements the decoding protocol with fixed next-token probabilities per image and
    prefix: ``tables[image][prefix] = {token: p}`` (unlisted prefixes: ``<eos>`` with p = 1).
    The image id is ``features[b, 0, 0]``; it counts its ``step`` calls. ``vocab``: the number
    of token ids (tokens a table does not list have probability 0)."""

    bos_id, eos_id, pad_id = BOS, EOS, PAD

    def __init__(self, tables: dict, vocab: int = 7):
        super().__init__()
        self.tables, self.vocab, self.steps = tables, vocab, 0
        self._rows: dict[tuple, torch.Tensor] = {}

    def row(self, image: int, prefix: tuple) -> torch.Tensor:
        """log p(next token | image, prefix), (V,) with -inf for probability 0."""
        key = (image, prefix)
        if key not in self._rows:
            out = torch.full((self.vocab,), float("-inf"))
            for token, p in self.tables[image].get(prefix, {EOS: 1.0}).items():
                out[token] = math.log(p)
            self._rows[key] = out
        return self._rows[key]

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


def scripted_batch(*images):
    """Features that name the images: (B, 1, 1) with ``features[b, 0, 0] = image``, all real."""
    features = torch.tensor([[[float(i)]] for i in images])
    return features, torch.ones(len(images), 1, dtype=torch.bool)
