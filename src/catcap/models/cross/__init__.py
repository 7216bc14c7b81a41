"""Cross-attention variants of the decoder, chosen by name (``model.cross_attention``).

Every variant is a residual sub-layer ``c = q + Attn(LayerNorm(q), memory)`` (SPEC.md §3
writes CACA this way, and the vanilla one — TCA — matches it, so that shared CACA adds no
parameters) with the same interface:

- ``prepare(memory (B, N, D)) -> prepared``: keys/values projected once per image;
- ``forward(q (R, T, D), prepared, memory_mask (B, N), query_mask (R, T), group=1) -> (c, extras)``:
  all caption positions in parallel (teacher forcing), R = B * group captions, ``group`` per
  image sharing its prepared memory (self-critical training scores n samples per image);
- ``init_cache(rows) -> cache`` and ``step(q (B*G, 1, D), prepared, memory_mask, cache, group)
  -> (c, cache, extras)``: one decoding step for B*G hypotheses, G per image.

``extras`` is a dict (e.g. CACA's history weights for the AWC loss); vanilla returns {}.
Variants: ``vanilla`` (TCA), ``caca`` (CACA; options ``strategy`` chc|ihc|ohc and ``shared``),
``light_caca`` (LightCACA; option ``strategy``) — see ``context_assisted.py``.
"""

from catcap.models.cross import context_assisted, vanilla  # noqa: F401  (register "caca", "light_caca", "vanilla")
