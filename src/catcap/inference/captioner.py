"""The public captioner: a trained model, its vocabulary and ``generate``.

    from catcap import Captioner
    cap = Captioner.from_pretrained("runs/demo/best")
    cap.generate(features)                      # beam 3, at most 20 words: GenerationConfig's defaults
    cap.generate(features, num_beams=5, no_repeat_ngram_size=3)
    cap.generate(features, do_sample=True, top_p=0.9, num_return_sequences=5, seed=0)
    cap.generate(images="photo.jpg")            # one image or a list (models trained on `catcap extract` features)
    out = cap.generate_output(features, output_attentions=True)   # tokens, scores, attention maps

The settings are those of :class:`~catcap.decoding.GenerationConfig` (docs/generation.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from catcap.config import from_dict
from catcap.data.collate import pad_regions
from catcap.data.vocab import Vocab
from catcap.decoding import GenerationConfig, GenerationOutput, build_generation_config, generate
from catcap.training.checkpoint import load_checkpoint
from catcap.training.experiment import ExperimentConfig
from catcap.training.distributed import pick_device
from catcap.training.setup import make_model

class Captioner:
    """A captioning model ready to caption features (B images, N regions, F width)."""

    def __init__(self, model, vocab: Vocab, config: ExperimentConfig, device: torch.device,
                 features_meta: dict | None = None, workdir: str | None = None):
        self.model, self.vocab, self.config, self.device = model.eval(), vocab, config, device
        self.features_meta = dict(features_meta or {})  # how the training features were made
        self.workdir = workdir  # the training run's working folder (its relative data paths start there)
        self._encoder = None

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str = "auto", dtype=None,
                        zoo: str | Path | None = None) -> "Captioner":
        """Load a trained captioner (no pickle): a checkpoint folder written by ``catcap train``, a
        zoo folder or the name of a bundled zoo model (``"flickr8k-m2"``, ``"flickr8k-cat"``; the zoo folder ``zoo``,
        default ``$CATCAP_ZOO`` or the repository's ``zoo/``), or a Hugging Face Hub id
        (``"owner/name"``, ``"hf://owner/name@revision"``; needs ``huggingface_hub``). A zoo folder's
        files are checked against the sha256 in its card. ``dtype``: the weights' dtype in memory,
        fp32 by default (a zoo model's fp16 weights are widened exactly); ``"bf16"`` / ``"fp16"``
        (or torch dtypes) keep them narrow. See docs/zoo.md."""
        from catcap import zoo as model_zoo

        folder = model_zoo.locate(directory, zoo)
        ckpt = model_zoo.load_zoo_folder(folder) if model_zoo.is_zoo_folder(folder) else load_checkpoint(folder)
        cfg = from_dict(ExperimentConfig, ckpt["config"])
        vocab = Vocab.from_dict(ckpt["vocab"])
        dev = pick_device(device)
        model = make_model(cfg, vocab)
        model.load_state_dict(ckpt["weights"])
        model = model.to(dev) if dtype is None else model.to(dev, dtype=weights_dtype(dtype))
        return cls(model, vocab, cfg, dev, ckpt.get("features"), ckpt.get("workdir"))

    @property
    def members(self) -> list["Captioner"]:
        """The captioners whose features are read: this one (an Ensemble has several)."""
        return [self]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's weights (features are given to it in this dtype); float32 for a
        model without parameters (e.g. a scripted test model)."""
        first = next(self.model.parameters(), None)
        return torch.float32 if first is None else first.dtype

    def data_file(self, name: str) -> str:
        """The training data file ``config.data.<name>`` (``dataset`` or ``features``) as a path
        that opens from here: a relative path is taken from the current folder when it exists
        there, else from the training run's working folder (recorded in the checkpoint)."""
        from catcap.inference.data_files import data_path

        return data_path(getattr(self.config.data, name), self.workdir)

    def check_store(self, store) -> None:
        """Refuse a feature store of another width, or made by another image encoder than this
        model's training features (same width does not mean same features: lite0 and lite1 are
        both 1280-d), with advice for a trained model (its width cannot change)."""
        width = getattr(store, "feature_dim", None)
        if width is not None and width != self.config.model.feature_dim:
            from catcap.data.features import CHECKPOINT_WIDTH_ADVICE

            raise ValueError(f"{getattr(store, 'path', 'the feature store')} holds {width}-d features, but this model "
                             f"reads {self.config.model.feature_dim}-d features; {CHECKPOINT_WIDTH_ADVICE}")
        made, found = self.features_meta.get("encoder"), getattr(store, "meta", {}).get("encoder")
        if made and found and made != found:
            raise ValueError(f"{getattr(store, 'path', 'the feature store')} holds {found} features, but this model "
                             f"was trained on {made} features; extract the images with `catcap extract --encoder "
                             f"{made}`" + (", or caption the image files themselves" if self.reads_pixels else ""))

    def reading(self, store):
        """``store`` checked (:meth:`check_store`) and as this model reads it: with the region
        geometry columns appended when the model embeds them (``model.region_geometry``)."""
        from catcap.data.geometry import with_geometry

        self.check_store(store)
        return with_geometry(store, self.config.model)

    @property
    def reads_pixels(self) -> bool:
        """True when this model's training features came from a catcap image encoder (``catcap
        extract``), so that it can caption image files from their pixels."""
        from catcap.features.efficientnet import ENCODERS

        return self.features_meta.get("encoder") in ENCODERS

    @property
    def image_encoder(self):
        """The image encoder that made this model's training features (from the checkpoint)."""
        if self._encoder is None:
            self._encoder = pixel_encoder(self.features_meta, self.device)
        return self._encoder

    @torch.no_grad()
    def image_features(self, images) -> list[np.ndarray]:
        """Raw images (one path or PIL image, or a list of them) -> per-image grid features (H*W,
        C), exactly as ``catcap extract`` computed this model's training features."""
        return images_to_features(self.image_encoder, image_list(images), self.device, self.config.model)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write this captioner as a zoo folder (fp32 weights, config, vocabulary and a model card
        with their sha256: :func:`catcap.zoo.write_model_folder`, as ``catcap zoo build`` writes
        one) that :meth:`from_pretrained` loads back; an existing folder is replaced. Returns it."""
        from catcap import zoo
        from catcap.config import to_dict

        ckpt = {"weights": self.model.state_dict(), "config": to_dict(self.config), "vocab": self.vocab.to_dict(),
                "features": dict(self.features_meta), "workdir": self.workdir}
        return zoo.write_model_folder(Path(directory), ckpt, zoo.saved_card("Captioner.save_pretrained"))

    def _batch(self, features, feature_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, N, F) features and (B, N) bool mask, True = real region; a list of (N_i, F) arrays
        is padded here (its lengths are the mask, so a ``feature_mask`` with it is refused)."""
        if isinstance(features, (list, tuple)):
            if feature_mask is not None:
                raise ValueError("feature_mask goes with a (B, N, F) tensor; a list of (N_i, F) arrays is "
                                 "padded by its own lengths: drop the feature_mask or trim each array")
            regions = [torch.as_tensor(np.asarray(f), dtype=torch.float32) for f in features]
            features, feature_mask, _ = pad_regions(regions, [None] * len(regions))
        features = torch.as_tensor(features, dtype=torch.float32)
        if feature_mask is None:
            feature_mask = torch.ones(features.shape[:2], dtype=torch.bool)
        feature_mask = torch.as_tensor(feature_mask, dtype=torch.bool)
        if features.shape[-1] != self.config.model.input_dim:
            geometry = " + 5 geometry columns (catcap.data.geometry)" if self.config.model.region_geometry else ""
            raise ValueError(f"features are {features.shape[-1]}-d but this model expects "
                             f"{self.config.model.feature_dim}-d features{geometry} "
                             f"({self.config.data.features or 'its training features'})")
        if feature_mask.shape != features.shape[:2]:
            raise ValueError(f"feature_mask must be (B, N) = {tuple(features.shape[:2])}, got {tuple(feature_mask.shape)}")
        empty = (~feature_mask.any(dim=1)).nonzero()[:, 0].tolist()
        if empty:
            raise ValueError(f"image(s) {empty[:5]} of the batch have no real region (their feature_mask rows are all "
                             "False): every image needs at least one region")
        bad = (~torch.isfinite(features) & feature_mask[..., None]).flatten(1).any(dim=1).nonzero()[:, 0].tolist()
        if bad:  # a NaN would silently turn every caption of its image into garbage
            raise ValueError(f"image(s) {bad[:5]} of the batch have NaN/inf feature values; expected finite "
                             "features: fix the extraction (catcap's feature stores refuse such values)")
        return features.to(self.device, dtype=self.dtype), feature_mask.to(self.device)

    def inputs(self, features=None, feature_mask=None, images=None) -> tuple[torch.Tensor, torch.Tensor]:
        """What :meth:`generate` decodes: features (B, N, F) tensor/array or a list of (N_i, F)
        arrays, or ``images`` (paths or PIL images; the checkpoint's image encoder makes their
        features) -> checked (B, N, F) features and (B, N) mask on the model's device."""
        if (features is None) == (images is None):
            raise ValueError("pass either features or images= to generate")
        if images is not None:
            features, feature_mask = self.image_features(images), None
        return self._batch(features, feature_mask)

    @torch.no_grad()
    def generate_output(self, features=None, feature_mask=None, *, images=None,
                        config: GenerationConfig | None = None, **settings) -> GenerationOutput:
        """:meth:`generate`'s decoding, returned whole: tokens, log-probabilities, scores and,
        when asked (``output_attentions=True``, ``output_history_weights=True``), every returned
        caption's attention maps per step, layer and head (:class:`~catcap.decoding.GenerationOutput`)."""
        config = build_generation_config(settings, config)
        feats, mask = self.inputs(features, feature_mask, images)
        return generate(self.model, feats, mask, config, vocab=self.vocab)

    def generate(self, features=None, feature_mask=None, *, images=None, config: GenerationConfig | None = None,
                 return_dict_in_generate: bool = False, output_scores: bool = False,
                 **settings) -> list[str] | list[list[str]] | dict:
        """Captions for features (B, N, F) tensor/array or a list of (N_i, F) arrays, or for
        ``images`` (one path or PIL image, or a list of them; the checkpoint's image encoder makes
        their features).

        ``config`` (a :class:`~catcap.decoding.GenerationConfig`) and/or its settings as keywords
        (``num_beams=5``, ``max_length=16``, ``do_sample=True``, ...; keywords win over
        ``config``); the defaults are beam 3 and at most 20 words. Returns one string per image,
        or a list of ``num_return_sequences`` strings per image; with ``return_dict_in_generate``
        (Hugging Face's name) a dict of those captions and their numbers (:func:`generation_dict`).
        """
        out = self.generate_output(features, feature_mask, images=images, config=config, **settings)
        return generation_dict(self.captions(out), out, return_dict_in_generate, output_scores)

    def captions(self, out: GenerationOutput) -> list[str] | list[list[str]]:
        """A :class:`~catcap.decoding.GenerationOutput`'s captions as text: one string per image,
        or a list of ``out.group`` strings per image."""
        texts = [" ".join(self.vocab.decode(row)) for row in out.tokens.cpu().tolist()]
        if out.group == 1:
            return texts
        return [texts[i:i + out.group] for i in range(0, len(texts), out.group)]


def generation_dict(captions, out: GenerationOutput, return_dict: bool, output_scores: bool):
    """``generate``'s return value: ``captions`` alone, or with ``return_dict`` a dict of
    ``captions`` (as without it), ``sequences`` (R, T) token ids after ``<bos>`` (padded with
    ``<pad>``), ``sequences_scores`` (R,) the ranking score (beam search: length-penalised),
    ``log_probs`` (R,) the captions' summed log-probabilities and ``lengths`` (R,) words +
    ``<eos>``; ``output_scores`` adds ``token_log_probs`` (R, T), each token's log-probability.
    Rows are image-major (row ``b * n + i``: caption ``i`` of image ``b``); recorded attention maps
    and history weights come along when the settings asked for them."""
    if not return_dict:
        if output_scores:
            raise ValueError("output_scores=True returns the scores inside a dict: pass return_dict_in_generate=True "
                             "too (or use generate_output for the whole GenerationOutput)")
        return captions
    result = {"captions": captions, "sequences": out.tokens, "sequences_scores": out.scores,
              "log_probs": out.log_probs, "lengths": out.lengths}
    if output_scores:
        result["token_log_probs"] = out.token_log_probs
    for name in ("region_attentions", "history_attentions", "history_weights"):
        if getattr(out, name) is not None:
            result[name] = getattr(out, name)
    return result


DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}


def weights_dtype(dtype) -> torch.dtype:
    """``from_pretrained``'s ``dtype``: None (fp32), a name (fp32, bf16, fp16) or a torch float dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    if dtype in set(DTYPES.values()):
        return dtype
    raise ValueError(f"dtype {dtype!r}: choose fp32, bf16 or fp16 (or torch.float32 / bfloat16 / float16)")


def pixel_encoder(features_meta: dict, device: torch.device):
    """The catcap image encoder that made a model's training features (``features_meta``: the
    feature store's meta recorded in the checkpoint), checked against it; a clear error when the
    features were not made by one (then the model cannot read raw images)."""
    from catcap.features.efficientnet import ENCODERS, ImageEncoder

    name = features_meta.get("encoder")
    if name not in ENCODERS:
        made_by = f"made by {name!r}, not a catcap image encoder" if name else "not made by a catcap image encoder"
        raise ValueError(f"this checkpoint's training features were {made_by} (feature store meta: "
                         f"{features_meta or 'none'}), so it cannot read raw images; use feature-store keys "
                         "instead, or train on features from `catcap extract`")
    encoder = ImageEncoder(name).to(device)
    expected = {k: features_meta[k] for k in ("input_size", "channels") if k in features_meta}
    found = {k: v for k, v in encoder.meta.items() if k in expected}
    if expected != found:
        raise ValueError(f"the checkpoint's features were made with {expected}, but encoder {name!r} "
                         f"here gives {found}; use the catcap version that extracted them")
    return encoder


def image_list(images) -> list:
    """``images=`` as a list: one path (str or os.PathLike) or PIL image becomes a list of one
    (a string is not iterated character by character); a list or tuple stays as it is."""
    import os

    from PIL import Image

    if isinstance(images, (str, os.PathLike, Image.Image)):
        return [images]
    return list(images)


@torch.no_grad()
def images_to_features(encoder, images, device: torch.device, model_cfg=None) -> list[np.ndarray]:
    """Raw images (paths or PIL images) -> per-image grid features (H*W, C) from ``encoder``,
    preprocessed as ``catcap extract`` does; with the cells' geometry columns appended when
    ``model_cfg`` (a ModelConfig) has ``region_geometry`` (catcap.data.geometry)."""
    from PIL import Image

    batch = []
    for item in images:
        if isinstance(item, Image.Image):
            batch.append(encoder.preprocess(item))  # preprocess converts (16-bit grey scaled, not clipped)
            continue
        try:
            with Image.open(item) as im:
                batch.append(encoder.preprocess(im))
        except (OSError, ValueError, Image.DecompressionBombError) as err:  # the bomb error is no OSError
            raise ValueError(f"cannot read image {item}: {err}") from None
    return grid_features(encoder, torch.stack(batch), device, model_cfg)


@torch.no_grad()
def grid_features(encoder, pixels: torch.Tensor, device: torch.device, model_cfg=None) -> list[np.ndarray]:
    """Preprocessed pixels (B, 3, S, S) -> per-image grid rows (H*W, C), plus the cells'
    geometry columns when ``model_cfg`` has ``region_geometry`` (shared by ``generate(images=)``
    and the pipeline of :mod:`catcap.inference.pipeline`)."""
    from catcap.data.geometry import grid_geometry_rows

    grid, _ = encoder(pixels.to(device))
    size = encoder.input_size  # normalised cell boxes do not depend on the photo's size: one set for all
    boxes = encoder.boxes(size, size)
    return [grid_geometry_rows(g.float().cpu().numpy(), boxes, model_cfg) for g in grid]
