"""Record the official implementations' outputs for catcap's transplant parity tests.

For each of self-critical.pytorch's TransformerModel, AoAModel, UpDownModel and Att2in2Model and
aimagelab/meshed-memory-transformer's M2 Transformer: build the official model at a small size,
set every parameter from a seeded generator, run it (eval mode, CPU fp32) and write
``tests/fixtures/parity/<name>.safetensors`` with

- ``official.<name>``: its state dict, by the official names;
- ``input.features`` (B, N, F), ``input.mask`` (B, N) (1 = real region), ``input.seq`` (B, T)
  (<bos> and four words, official ids), ``input.fc`` (Up-Down: the mean of each image's real
  region features, as the official scripts/make_bu_data.py writes cocobu_fc);
- ``output.teacher`` (B, T, V): teacher-forced log-probabilities (the official forward);
- ``output.greedy_tokens`` (B, 3) and ``output.greedy_logprobs`` (B, 3, V): three greedy steps
  (self-critical.pytorch's ``_sample`` with sample_method greedy; M2's stateful ``step`` in
  feedback mode, as its ``test``);
- metadata ``options`` (the official constructor options), ``commit``, and ``official_size``:
  the official model's parameter count at catcap's preset sizes with 10,000 output ids.

A seed is kept only if no greedy step picks <eos> and every greedy step's best log-probability
leads the second by more than 1e-3 (so that a 1e-5 difference cannot flip a choice).

Nothing of the official code is copied: it is imported at run time from the checkouts given.
Shims, applied here and nowhere else: ``six`` (self-critical.pytorch's utils/misc.py pickles
with six.moves.cPickle) and ``requests`` (M2's utils/utils.py downloads with it) are stubbed
when not installed; ``captioning.models`` is registered as a bare package so that its
``__init__.py`` (which imports every model, BERT's included) does not run; and, for M2's
decoding, ``Tensor.masked_fill`` takes a uint8 mask as the bool mask it means (M2 concatenates
its bool step masks onto a uint8 buffer, which torch before 1.2 accepted and torch 2 refuses).

Get the official code (any folder outside this repository):
    git clone https://github.com/ruotianluo/self-critical.pytorch /tmp/sc
    git clone https://github.com/aimagelab/meshed-memory-transformer /tmp/m2
Usage: python tools/parity_fixtures.py --sc /tmp/sc --m2 /tmp/m2 [--out tests/fixtures/parity]
"""

from __future__ import annotations

import argparse
import importlib
import json
import pickle
import subprocess
import sys
import types
from argparse import Namespace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
B, N, F, T, STEPS = 2, 5, 12, 5, 3
WORDS = 20  # self-critical.pytorch's vocab_size (ids 0..20); M2's vocabulary: 4 specials + 20 words
SC_EOS, M2_BOS, M2_EOS, M2_PAD = 0, 2, 3, 1
GET_IT = ("clone https://github.com/ruotianluo/self-critical.pytorch and "
          "https://github.com/aimagelab/meshed-memory-transformer and pass --sc DIR --m2 DIR")

SC_BASE = {"vocab_size": WORDS, "num_layers": 1, "drop_prob_lm": 0.5, "max_length": STEPS, "seq_length": STEPS,
           "fc_feat_size": F, "att_feat_size": F, "use_bn": 0}
SC_MODELS = {
    "transformer": ("TransformerModel", "TransformerModel",
                    {"input_encoding_size": 16, "rnn_size": 32, "att_hid_size": 8, "N_enc": 2, "N_dec": 2,
                     "d_model": 16, "d_ff": 32, "num_att_heads": 4, "dropout": 0.1}),
    "aoanet": ("AoAModel", "AoAModel",
               {"input_encoding_size": 8, "rnn_size": 16, "att_hid_size": 8, "num_layers": 2, "num_heads": 4,
                "multi_head_scale": 1, "use_multi_head": 2, "refine": 1, "refine_aoa": 1, "use_ff": 0,
                "decoder_type": "AoA", "mean_feats": 1, "ctx_drop": 1, "dropout_aoa": 0.3}),
    "updown": ("AttModel", "UpDownModel", {"input_encoding_size": 8, "rnn_size": 16, "att_hid_size": 8}),
    "att2in2": ("AttModel", "Att2in2Model", {"input_encoding_size": 8, "rnn_size": 16, "att_hid_size": 8}),
}
#: catcap's preset sizes (configs/models), official options, 10,000 output ids (9,999 words + index 0)
SC_PRESET_SIZES = {
    "transformer": {"input_encoding_size": 512, "rnn_size": 2048, "att_hid_size": 512, "N_enc": 3, "N_dec": 3,
                    "d_model": 512, "d_ff": 2048, "num_att_heads": 8, "dropout": 0.1},
    "aoanet": {**SC_MODELS["aoanet"][2], "input_encoding_size": 1024, "rnn_size": 1024, "num_heads": 8},
    "updown": {"input_encoding_size": 1000, "rnn_size": 1000, "att_hid_size": 512},
    "att2in2": {"input_encoding_size": 512, "rnn_size": 512, "att_hid_size": 512},
}
M2_OPTIONS = {"N_enc": 3, "N_dec": 2, "d_model": 16, "h": 4, "d_ff": 32, "m": 5, "max_len": 10, "vocab": WORDS + 4}
M2_PRESET = {"N_enc": 3, "N_dec": 3, "d_model": 512, "h": 8, "d_ff": 2048, "m": 40, "max_len": 64, "vocab": 10000}


def stub(name: str, **attributes) -> None:
    """Put a minimal module ``name`` in sys.modules when the real one is not installed."""
    try:
        importlib.import_module(name)
    except ImportError:
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module


def load_sc(root: Path) -> dict[str, type]:
    moves = types.ModuleType("six.moves")
    moves.cPickle = pickle
    stub("six", PY3=True, moves=moves)
    sys.modules.setdefault("six.moves", sys.modules["six"].moves)
    sys.path.insert(0, str(root))
    importlib.import_module("captioning")
    package = types.ModuleType("captioning.models")  # bare package: skip __init__.py's other models
    package.__path__ = [str(root / "captioning" / "models")]
    sys.modules["captioning.models"] = package
    return {name: getattr(importlib.import_module(f"captioning.models.{module}"), cls)
            for name, (module, cls, _) in SC_MODELS.items()}


def _uint8_masks_as_bool() -> None:
    masked_fill = torch.Tensor.masked_fill

    def patched(self, mask, value):
        return masked_fill(self, mask.bool() if mask.dtype == torch.uint8 else mask, value)

    torch.Tensor.masked_fill = patched


def load_m2(root: Path):
    stub("requests")
    _uint8_masks_as_bool()
    sys.path.insert(0, str(root))
    return importlib.import_module("models.transformer")


def commit(root: Path, given: str | None) -> str:
    if given:
        return given
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else "unknown (pass --sc-commit / --m2-commit)"


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter from a seeded generator (so that a wrong mapping of any of them shows):
    matrices U(+-1.5/sqrt(last dim)), LayerNorm gains around 1, other vectors N(0, 0.3^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * 1.5 / p.shape[-1] ** 0.5)
            elif "norm" in name and name.endswith(("weight", "a_2")):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def inputs(seed: int, padded: bool, first_word: int, words: int):
    g = torch.Generator().manual_seed(1000 + seed)
    features = torch.randn(B, N, F, generator=g)
    mask = torch.ones(B, N)
    if padded:
        mask[1, 3:] = 0
        features[1, 3:] = 0  # the official loaders pad with zeros
    seq = torch.randint(first_word, first_word + words, (B, T), generator=g)
    return features, mask, seq


def decisive(logprobs: torch.Tensor, tokens: torch.Tensor, eos: int) -> bool:
    """No <eos> among the greedy tokens and every step's best leads its second by > 1e-3."""
    top = logprobs.topk(2, -1).values
    return bool((tokens != eos).all()) and bool((top[..., 0] - top[..., 1] > 1e-3).all())


def record_sc(name: str, cls: type, seed: int) -> dict | None:
    options = {**SC_BASE, **SC_MODELS[name][2]}
    vocab = {str(i): f"w{i}" for i in range(1, WORDS + 1)}
    model = cls(Namespace(**options, vocab=vocab))
    randomise(model, seed)
    model.eval()
    features, mask, words = inputs(seed, True, 1, WORDS)
    seq = torch.cat([torch.full((B, 1), SC_EOS), words[:, :T - 1]], 1)  # <bos> = 0, then four words
    fc = (features * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    with torch.no_grad():
        teacher = model(fc, features, seq, mask)
        tokens, logprobs = model(fc, features, mask, opt={"sample_method": "greedy", "beam_size": 1,
                                                           "sample_n": 1, "group_size": 1}, mode="sample")
    if not decisive(logprobs, tokens, SC_EOS):
        return None
    tensors = {"input.features": features, "input.mask": mask, "input.seq": seq, "input.fc": fc,
               "output.teacher": teacher, "output.greedy_tokens": tokens, "output.greedy_logprobs": logprobs}
    tensors.update({f"official.{k}": v for k, v in model.named_parameters()})
    big = cls(Namespace(**{**SC_BASE, **SC_PRESET_SIZES[name], "vocab_size": 9999, "fc_feat_size": 2048,
                           "att_feat_size": 2048}, vocab={str(i): "w" for i in range(1, 10000)}))
    return {"tensors": tensors, "options": options, "official_size": sum(p.numel() for p in big.parameters())}


def build_m2(m2, o: dict, d_in: int) -> torch.nn.Module:
    encoder = m2.MemoryAugmentedEncoder(o["N_enc"], 0, d_in=d_in, d_model=o["d_model"],
                                        d_k=o["d_model"] // o["h"], d_v=o["d_model"] // o["h"], h=o["h"], d_ff=o["d_ff"],
                                        attention_module=m2.ScaledDotProductAttentionMemory,
                                        attention_module_kwargs={"m": o["m"]})
    decoder = m2.MeshedDecoder(o["vocab"], o["max_len"], o["N_dec"], M2_PAD, d_model=o["d_model"],
                               d_k=o["d_model"] // o["h"], d_v=o["d_model"] // o["h"], h=o["h"], d_ff=o["d_ff"])
    return m2.Transformer(M2_BOS, encoder, decoder)


def record_m2(m2, seed: int) -> dict | None:
    model = build_m2(m2, M2_OPTIONS, F)
    randomise(model, seed)
    model.eval()
    features, mask, words = inputs(seed, False, 4, WORDS)  # no padding: docs/m2.md on the official mask
    seq = torch.cat([torch.full((B, 1), M2_BOS), words[:, :T - 1]], 1)
    with torch.no_grad():
        teacher = model(features, seq)
        steps, out = [], None
        with model.statefulness(B):  # CaptioningModel.test's loop, without its masking after <eos>
            for t in range(STEPS):
                logprobs = model.step(t, out, features, None, mode="feedback")
                out = logprobs.max(-1)[1]
                steps.append((logprobs[:, 0], out[:, 0]))
    logprobs, tokens = torch.stack([s[0] for s in steps], 1), torch.stack([s[1] for s in steps], 1)
    if not decisive(logprobs, tokens, M2_EOS):
        return None
    tensors = {"input.features": features, "input.mask": mask, "input.seq": seq, "output.teacher": teacher,
               "output.greedy_tokens": tokens, "output.greedy_logprobs": logprobs}
    tensors.update({f"official.{k}": v for k, v in model.named_parameters()})  # no decoding-state buffers
    big = build_m2(m2, M2_PRESET, 2048)
    return {"tensors": tensors, "options": M2_OPTIONS, "official_size": sum(p.numel() for p in big.parameters())}


def save(out: Path, name: str, record: dict, seed: int, source: str) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.contiguous().float() if v.is_floating_point() else v.contiguous() for k, v in record["tensors"].items()}
    meta = {"options": json.dumps(record["options"]), "commit": source, "seed": str(seed),
            "official_size": str(record["official_size"])}
    save_file(tensors, str(out / f"{name}.safetensors"), metadata=meta)
    print(f"{name}: seed {seed}, {(out / f'{name}.safetensors').stat().st_size} bytes, "
          f"{record['official_size']:,} official parameters at catcap's preset sizes")


def first_decisive(record, *args) -> tuple[dict, int]:
    for seed in range(50):
        done = record(*args, seed)
        if done is not None:
            return done, seed
    raise SystemExit("no seed in 0..49 gives decisive greedy steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sc", type=Path, help="a checkout of ruotianluo/self-critical.pytorch")
    parser.add_argument("--m2", type=Path, help="a checkout of aimagelab/meshed-memory-transformer")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "parity")
    parser.add_argument("--sc-commit", help="the checkout's commit, when it is not a git work tree")
    parser.add_argument("--m2-commit", help="the checkout's commit, when it is not a git work tree")
    args = parser.parse_args()
    if args.sc is None or not (args.sc / "captioning" / "models" / "AttModel.py").is_file():
        sys.exit(f"no self-critical.pytorch checkout at --sc {args.sc}: {GET_IT}")
    if args.m2 is None or not (args.m2 / "models" / "transformer" / "decoders.py").is_file():
        sys.exit(f"no meshed-memory-transformer checkout at --m2 {args.m2}: {GET_IT}")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, cls in load_sc(args.sc).items():
        record, seed = first_decisive(lambda s, n=name, c=cls: record_sc(n, c, s))
        save(args.out, name, record, seed, f"ruotianluo/self-critical.pytorch@{commit(args.sc, args.sc_commit)}")
    m2 = load_m2(args.m2)
    record, seed = first_decisive(lambda s: record_m2(m2, s))
    save(args.out, "m2", record, seed, f"aimagelab/meshed-memory-transformer@{commit(args.m2, args.m2_commit)}")


if __name__ == "__main__":
    main()
