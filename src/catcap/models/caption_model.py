"""CaptionModel = encoder + decoder, with the decoding protocol every decoder follows.

    memory, mask = model.encode(features, feature_mask)     # once per image
    state = model.init_state(memory, mask, group=G)         # G hypotheses per image
    logits, state = model.step(tokens, state)               # tokens (B*G,), logits (B*G, V)
    logits, state, extras = model.step_with_extras(tokens, state)  # ... and each layer's attention
    state = state.reorder(index)                            # beam search (keep/permute hypotheses)
    state = state.reorder(index, group=K)                   # ... and change G (beam's first step)

``forward`` is the teacher-forced pass used for XE training: captions (B, T) are
``<bos> w_1 .. w_k <eos> <pad>..``; the model reads positions 0..T-2 and its logits
(B, T-1, V) predict positions 1..T-1.
"""

from __future__ import annotations

from torch import Tensor, nn

from catcap.models.decoders.state import DecoderState


class CaptionModel(nn.Module):
    """An image encoder and a caption decoder (B images, N regions, F feature width)."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, bos_id: int, eos_id: int, pad_id: int):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id

    def encode(self, features: Tensor, feature_mask: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, F), (B, N) -> memory (B, N, D) and its mask."""
        return self.encoder(features, feature_mask), feature_mask

    def forward(self, features: Tensor, feature_mask: Tensor, captions: Tensor, caption_mask: Tensor):
        """Teacher forcing: -> logits (B, T-1, V) for targets ``captions[:, 1:]``, extras per layer."""
        memory, mask = self.encode(features, feature_mask)
        return self.decoder(captions[:, :-1], caption_mask[:, :-1], memory, mask)

    def init_state(self, memory: Tensor, memory_mask: Tensor, group: int = 1) -> DecoderState:
        return self.decoder.init_state(memory, memory_mask, group)

    def step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """One decoding step for every hypothesis: tokens (B*G,) -> logits (B*G, V), next state."""
        logits, state, _ = self.decoder.step(tokens, state)
        return logits, state

    def step_with_extras(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState, list[dict]]:
        """:meth:`step` plus the decoder's extras, one dict per layer: ``region_attention``
        (B*G, H, 1, N), ``history_attention`` (B*G, H, 1, M), ``history_weight`` (B*G, H, 1)
        of this step, each None or absent where the layer's cross attention has none."""
        return self.decoder.step(tokens, state)
