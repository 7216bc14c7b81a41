"""Cross attention: how a decoder reads the image, and CACA / LightCACA, chosen by name.

``model.cross_attention`` names a variant in ``CROSS_ATTENTION`` (:mod:`.assist`): ``vanilla``
(the family's plain attention, TCA), ``caca`` (CACA; options ``strategy`` chc|ihc|ohc,
``shared``, ``normalize``, ``placement``) or ``light_caca`` (LightCACA; ``strategy``,
``normalize``). A variant is a :class:`~catcap.models.cross.assist.ContextAssist` (None for
``vanilla``), the one object that runs CACA's passes for every decoder; the decoder's attention
*family* supplies the passes:

- :mod:`.transformer` — the Transformer and M2 decoders: a residual sub-layer over ``(R, T, D)``
  queries and the encoder levels its mix reads (:mod:`.mix`), pre- or post-norm; ``prepare`` /
  ``forward`` (all positions) / ``init_cache`` / ``step``;
- :mod:`.soft` — Att2in, Up-Down, Look-Back: additive attention of one step's ``(R, D)`` query;
- :mod:`.aoa` — AoANet: multi-head attention of one step's query, heads concatenated.

Every family returns ``extras`` (the final pass's history weight and attention weights; {} for
``vanilla``). :mod:`.history` holds the attention over ``[regions; history]`` in one softmax,
:mod:`.memory` the decoding memories.
"""

from catcap.models.cross import assist  # noqa: F401  (registers "vanilla", "caca", "light_caca")
