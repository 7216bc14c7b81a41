"""Tiny captioners built straight from the model classes (no config), shared by the decoder
contract and beam-search tests (importable as ``tiny_models``: tests/ is on sys.path)."""

import torch

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
import catcap.models.decoders.aoa  # noqa: F401  (registers AoANet's decoder)
import catcap.models.decoders.lstm  # noqa: F401  (registers the recurrent decoders)
from catcap.models.caption_model import CaptionModel
from catcap.models.cross.aoa import HeadAttention
from catcap.models.cross.soft import SoftAttention
from catcap.models.cross.transformer import TransformerCrossAttention
from catcap.models.decoders.transformer import M2Decoder, MeshedDecoder, TransformerDecoder
from catcap.models.encoders.aoa import AoARefiner
from catcap.models.encoders.embed import RegionEmbedding
from catcap.models.encoders.transformer import M2Encoder, MemoryAugmentedEncoder, TransformerEncoder
from catcap.models.vlp import VLPDecoder, VLPRegions
from catcap.registry import CROSS_ATTENTION, DECODERS

VOCAB, FEATURES, WIDTH = 30, 12, 16
RECURRENT = ("att2in", "updown", "lookback")

# Every decoder x cross-attention variant the shared decoder contract covers: (arch, cross, options)
# for tiny_captioner, with readable test ids.
_CROSS = [
    ("vanilla", {}),
    ("caca", {}), ("caca", {"strategy": "ihc"}), ("caca", {"strategy": "ohc"}), ("caca", {"shared": False}),
    ("caca", {"strategy": "ihc", "shared": False}),
    ("light_caca", {}), ("light_caca", {"strategy": "ihc"}), ("light_caca", {"strategy": "ohc"}),
    ("caca", {"normalize": False}), ("light_caca", {"normalize": False}),
]
# M2: the same variants in the meshed decoder, and CACA's history after the gates
_MESHED = [("m2", name, opts) for name, opts in _CROSS] + [
    ("m2", "caca", {"placement": "gated"}), ("m2", "caca", {"placement": "gated", "strategy": "ihc"}),
    ("m2", "caca", {"placement": "gated", "shared": False}), ("m2", "caca", {"placement": "gated", "strategy": "ohc"}),
]
# the official M2 (post-norm sub-layers): its cross attention with and without CACA's history
_M2_OFFICIAL = [("m2_official", name, opts) for name, opts in [
    ("vanilla", {}), ("caca", {}), ("caca", {"strategy": "ihc"}), ("caca", {"strategy": "ohc"}),
    ("caca", {"shared": False}), ("caca", {"placement": "gated"}), ("light_caca", {})]]
# the recurrent decoders with soft attention: vanilla, CACA (strategies, not shared), LightCACA
_SOFT = [("vanilla", {}), ("caca", {}), ("caca", {"strategy": "ihc"}), ("caca", {"strategy": "ohc"}),
        ("caca", {"shared": False}), ("light_caca", {}), ("light_caca", {"strategy": "ihc"}),
        ("light_caca", {"strategy": "ohc"})]
_RECURRENT = [(arch, name, opts) for arch in ("att2in", "updown", "lookback", "aoa") for name, opts in _SOFT]
CONTRACT_VARIANTS = ([("transformer", name, opts) for name, opts in _CROSS] + _MESHED + _M2_OFFICIAL + _RECURRENT
                     + [("vlp", "vanilla", {}), ("vlp_geometry", "vanilla", {})])
CONTRACT_IDS = ["-".join([arch, name, *map(str, opts.values())]) for arch, name, opts in CONTRACT_VARIANTS]


def contract_batch():
    """Three images (5, 3 and 2 real regions of the 5) with one caption each (6, 4 and 3 tokens of
    6): features, feature mask, captions, caption mask."""
    g = torch.Generator().manual_seed(1)
    features = torch.randn(3, 5, FEATURES, generator=g)
    feature_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    captions = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 10, 2, 0, 0], [1, 11, 2, 0, 0, 0]])
    return features, feature_mask, captions, captions != 0


def tiny_captioner(arch: str = "transformer", cross: str = "vanilla", options: dict | None = None, seed: int = 0,
                   bos_id: int = 1, eos_id: int = 2, pad_id: int = 0) -> CaptionModel:
    """The Transformer (2 + 2 layers, D=16, 2 heads), or ``arch="m2"``: a memory-augmented
    encoder of 3 layers with 4 slots per head whose 3 levels the meshed decoder's 2 layers read
    (``arch="m2_official"``: the official M2's post-norm encoder and decoder at those sizes);
    or a recurrent decoder (``att2in``, ``updown``, ``lookback``: rnn D=16, word embedding 8,
    attention hidden 8) over embedded regions; or ``arch="aoa"``: AoANet, a 2-layer refiner and
    the AoA decoder (rnn D=16, 2 heads, word embedding 8). ``cross`` / ``options`` pick the cross
    (soft, head) attention; or ``arch="vlp"``: the one-stream VLP model (2 shared layers, D=16,
    2 heads; no cross attention; ``arch="vlp_geometry"``: with the region geometry term, reading
    the last 5 feature columns as box geometry). In eval mode."""
    torch.manual_seed(seed)
    history = CROSS_ATTENTION.get(cross)(**(options or {}))
    if arch in ("vlp", "vlp_geometry"):
        dec = VLPDecoder(VOCAB, WIDTH, 2, 2, 32, 0.1, max_len=12, pad_id=pad_id)
        geometry = arch == "vlp_geometry"  # the last 5 of the FEATURES columns are box geometry
        enc = VLPRegions(FEATURES - 5 * geometry, WIDTH, 2, 1, 1, 0.1, region_geometry=geometry)
        return CaptionModel(enc, dec, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id).eval()
    if arch == "aoa":
        def make_heads(look_back):
            return HeadAttention(WIDTH, 2, history=history)

        dec = DECODERS.get("aoa")(VOCAB, WIDTH, 8, 0.1, make_heads, pad_id=pad_id)
        enc = AoARefiner(FEATURES, WIDTH, 2, 2, 1, 0.1)
        return CaptionModel(enc, dec, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id).eval()
    if arch in RECURRENT:
        def make_soft(look_back):
            return SoftAttention(WIDTH, 8, look_back=look_back, history=history)

        dec = DECODERS.get(arch)(VOCAB, WIDTH, 8, 0.1, make_soft, pad_id=pad_id)
        enc = RegionEmbedding(FEATURES, WIDTH, 1, 1, 1, 0.1)
        return CaptionModel(enc, dec, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id).eval()

    def make_cross(mix, post_norm=False):
        return TransformerCrossAttention(WIDTH, 2, 0.1, mix=mix, history=history, post_norm=post_norm)

    if arch == "m2_official":
        enc = M2Encoder(FEATURES, WIDTH, 2, 3, 32, 0.1, memory_slots=4)
        dec = M2Decoder(VOCAB, WIDTH, 2, 2, 32, 0.1, make_cross, max_len=12, memory_levels=3)
    elif arch == "m2":
        enc = MemoryAugmentedEncoder(FEATURES, WIDTH, 2, 3, 32, 0.1, memory_slots=4)
        dec = MeshedDecoder(VOCAB, WIDTH, 2, 2, 32, 0.1, make_cross, memory_levels=3)
    else:
        enc = TransformerEncoder(FEATURES, WIDTH, 2, 2, 32, 0.1)
        dec = TransformerDecoder(VOCAB, WIDTH, 2, 2, 32, 0.1, make_cross)
    return CaptionModel(enc, dec, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id).eval()


def ending_captioner(variant: tuple, eos_id: int = 2):
    """``tiny_captioner(*variant)`` with ``<eos>`` made likelier, so that an untrained model's
    captions end at different steps (the official M2's output layer has no bias: its ``<eos>``
    row is scaled up instead)."""
    model = tiny_captioner(*variant, bos_id=1, eos_id=eos_id, pad_id=0)
    output = model.decoder.output
    with torch.no_grad():
        if output.bias is not None:
            output.bias[eos_id] += 0.6
        else:
            output.weight[eos_id] *= 4.0
    return model
