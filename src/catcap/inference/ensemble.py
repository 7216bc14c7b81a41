"""``Ensemble``: several trained captioners decoding as one (one search over their combined
next-token log-probabilities; :mod:`catcap.decoding.ensemble` says how they are combined).

    from catcap import Captioner, Ensemble
    ens = Ensemble([Captioner.from_pretrained("flickr8k-m2"), Captioner.from_pretrained("flickr8k-cat")])
    ens.generate(features)                       # features every member reads, GenerationConfig's defaults
    ens.generate(member_features=[(f_a, m_a), (f_b, m_b)])   # each member its own features
    ens.generate(images=["photo.jpg"])           # each member's own image encoder

The members must share one vocabulary (the same words with the same ids) and one device.
``catcap evaluate --checkpoint A --checkpoint B`` and ``catcap caption --checkpoint A,B`` build
one with :func:`load_captioner`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from catcap.decoding import GenerationConfig, GenerationOutput, build_generation_config, generate
from catcap.decoding.ensemble import EnsembleModel
from catcap.inference.captioner import Captioner, generation_dict


class Ensemble:
    """Captioners decoding together; ``combine``: ``mean_log_prob`` (default) or ``mean_prob``."""

    def __init__(self, captioners: Sequence[Captioner], combine: str = "mean_log_prob"):
        self.members = list(captioners)
        if not self.members:
            raise ValueError("an ensemble needs at least one captioner")
        first = self.members[0]
        for i, other in enumerate(self.members[1:], 1):
            if other.vocab.to_dict() != first.vocab.to_dict():
                raise ValueError(f"member {i} has another vocabulary than member 0 ({len(other.vocab)} against "
                                 f"{len(first.vocab)} words, or the same words with other ids): an ensemble's "
                                 "members must share one vocabulary, e.g. models trained on the same dataset "
                                 "preparation (catcap prepare)")
            if other.device != first.device:
                raise ValueError(f"member {i} is on {other.device}, member 0 on {first.device}: load every member "
                                 "with the same device=")
        self.vocab, self.device = first.vocab, first.device
        self.model = EnsembleModel([m.model for m in self.members], combine)

    @classmethod
    def from_pretrained(cls, sources: Sequence[str | Path], device: str = "auto", dtype=None,
                        zoo: str | Path | None = None, combine: str = "mean_log_prob") -> "Ensemble":
        """Every source as :meth:`Captioner.from_pretrained` loads it."""
        return cls([Captioner.from_pretrained(s, device=device, dtype=dtype, zoo=zoo) for s in sources], combine)

    # -- what the caption pipeline and the evaluation ask of a captioner, when members agree ----

    @property
    def shared(self) -> Captioner:
        """The first member, standing for all of them where they must agree: the features
        they read (checkpoint's image encoder, width, region geometry); a clear error otherwise."""
        first = self.members[0]
        for i, other in enumerate(self.members[1:], 1):
            same = (other.features_meta.get("encoder") == first.features_meta.get("encoder")
                    and other.config.model.input_dim == first.config.model.input_dim
                    and other.config.model.region_geometry == first.config.model.region_geometry)
            if not same:
                raise ValueError(f"member {i} reads other features than member 0 (image encoder "
                                 f"{other.features_meta.get('encoder')!r} against {first.features_meta.get('encoder')!r}, "
                                 f"{other.config.model.input_dim}-d against {first.config.model.input_dim}-d): captioning "
                                 "images or one feature store needs members trained on the same features; give each "
                                 "member its own with Ensemble.generate(member_features=...)")
        return first

    @property
    def config(self):
        return self.shared.config

    @property
    def reads_pixels(self) -> bool:
        return self.shared.reads_pixels

    @property
    def image_encoder(self):
        return self.shared.image_encoder

    def reading(self, store):
        return self.shared.reading(store)

    def data_file(self, name: str) -> str:
        return self.shared.data_file(name)

    # -- generation ----------------------------------------------------------------------------

    @torch.no_grad()
    def generate_output(self, features=None, feature_mask=None, *, images=None, member_features=None,
                        config: GenerationConfig | None = None, **settings) -> GenerationOutput:
        """As :meth:`Captioner.generate_output`. ``features`` (with ``feature_mask``) are read by
        every member; ``member_features``: one ``features`` or ``(features, feature_mask)`` per
        member instead; ``images``: each member makes their features with its own encoder."""
        config = build_generation_config(settings, config)
        if config.records_steps:
            raise ValueError("output_attentions / output_history_weights: an ensemble has no attention of its own; "
                             "read the attention maps from one member (Captioner.generate_output)")
        if member_features is not None:
            if features is not None or images is not None:
                raise ValueError("pass member_features, or features / images= that every member reads, not both")
            if len(member_features) != len(self.members):
                raise ValueError(f"member_features needs one entry per member ({len(self.members)}), "
                                 f"got {len(member_features)}")
            pairs = [item if isinstance(item, tuple) else (item, None) for item in member_features]
            inputs = [m.inputs(f, mask) for m, (f, mask) in zip(self.members, pairs)]
        else:
            inputs = [m.inputs(features, feature_mask, images) for m in self.members]
        return generate(self.model, [f for f, _ in inputs], [m for _, m in inputs], config, vocab=self.vocab)

    def generate(self, features=None, feature_mask=None, *, images=None, member_features=None,
                 config: GenerationConfig | None = None, return_dict_in_generate: bool = False,
                 output_scores: bool = False, **settings) -> list[str] | list[list[str]] | dict:
        """Captions, as :meth:`Captioner.generate` (see :meth:`generate_output` for the inputs)."""
        out = self.generate_output(features, feature_mask, images=images, member_features=member_features,
                                   config=config, **settings)
        return generation_dict(self.members[0].captions(out), out, return_dict_in_generate, output_scores)


def load_captioner(sources, device: str = "auto", dtype=None, zoo: str | Path | None = None,
                   combine: str = "mean_log_prob"):
    """One source (a path or name) -> a :class:`Captioner`; several -> an :class:`Ensemble`
    (``combine``: how it combines its members, :mod:`catcap.decoding.ensemble`)."""
    if isinstance(sources, (str, Path)):
        return Captioner.from_pretrained(sources, device=device, dtype=dtype, zoo=zoo)
    sources = list(sources)
    if len(sources) == 1:
        return Captioner.from_pretrained(sources[0], device=device, dtype=dtype, zoo=zoo)
    return Ensemble.from_pretrained(sources, device=device, dtype=dtype, zoo=zoo, combine=combine)
