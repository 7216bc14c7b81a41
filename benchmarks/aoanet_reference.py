"""Decoding speed of the public reference AoANet code (husthuaan/AoANet), on decode.py's workload.

The reference model (``models.AoAModel.AoAModel``) is built with the options of its train.sh
recipe (refiner of 6 AoA self-attention layers without feed-forward, 8-head AoA decoder, mean
feats, ctx_drop, rnn size and word embedding 1024) and timed exactly as ``benchmarks/decode.py``
times catcap's ``aoanet`` preset: random weights (seed 0), vocab 10,000, 50 images x 50 regions
x 2048-d features (seed 0, all regions real), max length 16, eval mode, no grad; greedy and
beam-5 decoding through the reference's own sampling entry, ``model._sample`` (what its
eval_utils.py reaches via ``model(..., mode='sample')``). Prints one JSON line per thread count:
{"model", "threads", "greedy_s", "beam_s", "greedy_s_min", "beam_s_min", "mean_len_greedy",
"mean_len_beam", "steps_greedy", "steps_beam", "device", "att_masks", "torch"} (medians and
minima of --repeats runs after one warm-up; mean caption length in words, up to the first end
token ``0``;
``steps_*`` = decoder steps (``get_logprobs_state`` calls) of one run, counted in the warm-up:
17 for greedy = 16 words + the final step, as in catcap; 50 x 17 for beam, one image at a time).
The reference does not suppress its end token as decode.py does, but its beam search runs all
16 steps anyway and greedy stops only when every row has ended, so the lengths show whether the
full 16 steps ran. Masks: like the reference's dataloader (which passes ``att_masks=None`` when
all regions are real) no mask is passed, unless ``--att-masks`` passes an all-ones mask.

The reference is not part of this repository; get a snapshot (any commit) first:
    git clone https://github.com/husthuaan/AoANet benchmarks/_work/AoANet   # git-ignored
Usage: python benchmarks/aoanet_reference.py [--threads 1 2] [--repeats 5] [--reference DIR]
       python benchmarks/aoanet_reference.py --device cuda --threads 1
Compare with: python benchmarks/decode.py --models aoanet --jobs greedy beam

Run-time shims (the snapshot is never edited; the 2019 code targets torch 1.x):
- ``six`` (imported by misc/utils.py) is stubbed in ``sys.modules`` when not installed, with
  ``six.PY3 = True`` and ``six.moves.cPickle = pickle`` (all that misc/utils.py uses).
- On CPU, ``torch.Tensor.cuda`` returns the tensor unchanged: CaptionModel.beam_search calls
  ``it.cuda()`` on every step (the code assumes a GPU).
- ``models.AttModel.pack_padded_sequence`` moves its lengths to the CPU first, as torch 1.x did
  itself (torch >= 1.7 refuses CUDA lengths); only reached with ``--att-masks``.
Importing ``models.AoAModel`` runs ``models/__init__.py``, which imports the package's other
model files too (all import cleanly, given ``six``); misc.rewards (which needs the cider
submodule) and the data loaders are not imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pickle
import statistics
import sys
import time
import types
from pathlib import Path

import torch
from torch.nn.utils.rnn import pack_padded_sequence

from workload import B, F, N, T, V

DEFAULT_REFERENCE = Path(__file__).resolve().parent / "_work" / "AoANet"

# The reference's train.sh recipe, plus every other option the AoAModel/AttModel constructors read.
OPTIONS = dict(caption_model="aoa", refine=1, refine_aoa=1, use_ff=0, decoder_type="AoA", use_multi_head=2,
               num_heads=8, multi_head_scale=1, mean_feats=1, ctx_drop=1, dropout_aoa=0.3, out_res=0,
               input_encoding_size=1024, rnn_size=1024, num_layers=2, att_feat_size=2048, fc_feat_size=2048,
               att_hid_size=512, drop_prob_lm=0.5, logit_layers=1, use_bn=0, norm_att_feat=0, use_box=0,
               norm_box_feat=0, seq_length=T, max_length=T, vocab_size=V)


def load_reference(root: Path, device: torch.device):
    """Import the reference's AoAModel class from the snapshot at ``root``, with the shims."""
    if not (root / "models" / "AoAModel.py").is_file():
        sys.exit(f"no AoANet snapshot at {root}: git clone https://github.com/husthuaan/AoANet {root}")
    try:
        importlib.import_module("six")
    except ImportError:  # shim: misc/utils.py only uses six.PY3 and six.moves.cPickle
        six, moves = types.ModuleType("six"), types.ModuleType("six.moves")
        six.PY3, six.moves, moves.cPickle = True, moves, pickle
        sys.modules["six"], sys.modules["six.moves"] = six, moves
    if device.type == "cpu":  # shim: beam_search moves each step's tokens with it.cuda()
        torch.Tensor.cuda = lambda self, *args, **kwargs: self
    sys.path.insert(0, str(root))
    model_cls = importlib.import_module("models.AoAModel").AoAModel
    attmodel = sys.modules["models.AttModel"]  # shim: torch >= 1.7 wants the lengths on the CPU
    attmodel.pack_padded_sequence = lambda x, lengths, **kw: pack_padded_sequence(x, lengths.cpu(), **kw)
    return model_cls


def mean_len(seq: torch.Tensor) -> float:
    """Mean number of words before the first end token (0) of each (B, T) row."""
    return round((seq > 0).long().cumprod(dim=1).sum(dim=1).float().mean().item(), 3)


class Reference:
    """The reference model and its two timed jobs on fixed inputs."""

    def __init__(self, model_cls, feats: torch.Tensor, masks: torch.Tensor | None, device: torch.device):
        vocab = {str(i): f"w{i}" for i in range(1, V + 1)}  # ix_to_word, 0 is the end token
        torch.manual_seed(0)
        self.model = model_cls(argparse.Namespace(**OPTIONS, vocab=vocab)).to(device).eval()
        self.device, self.att = device, feats.to(device)
        self.fc = self.att.mean(dim=1)  # unused by the recipe (mean_feats 1), as the bottom-up fc feats
        self.masks = None if masks is None else masks.to(device)

    def run(self, beam_size: int) -> torch.Tensor:
        opt = {"sample_method": "greedy", "beam_size": beam_size, "temperature": 1.0}
        with torch.no_grad():
            seq, _ = self.model._sample(self.fc, self.att, self.masks, opt=opt)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return seq

    def counted(self, beam_size: int) -> tuple[torch.Tensor, int]:
        """One run (the warm-up) that also counts the decoder steps."""
        inner, calls = self.model.get_logprobs_state, [0]

        def step(*args, **kwargs):
            calls[0] += 1
            return inner(*args, **kwargs)

        self.model.get_logprobs_state = step
        try:
            seq = self.run(beam_size)
        finally:
            del self.model.get_logprobs_state
        return seq, calls[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                        help="snapshot of github.com/husthuaan/AoANet (default: benchmarks/_work/AoANet)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--att-masks", action="store_true", help="pass an all-ones mask instead of None")
    args = parser.parse_args()
    device = torch.device(args.device)
    model_cls = load_reference(args.reference.resolve(), device)
    torch.manual_seed(0)  # the same features as decode.py
    feats = torch.randn(B, N, F)
    masks = torch.ones(B, N) if args.att_masks else None
    ref = Reference(model_cls, feats, masks, device)
    for threads in args.threads if device.type == "cpu" else [torch.get_num_threads()]:
        torch.set_num_threads(threads)
        times, lengths, steps = {}, {}, {}
        for job, beam_size in (("greedy", 1), ("beam", 5)):
            seq, steps[job] = ref.counted(beam_size)  # the warm-up
            assert seq.shape == (B, T), seq.shape
            lengths[job], times[job] = mean_len(seq), []
            for _ in range(args.repeats):
                start = time.perf_counter()
                ref.run(beam_size)
                times[job].append(time.perf_counter() - start)
        result = {"model": "AoANet (reference code)", "threads": threads}
        result.update({f"{job}_s": round(statistics.median(t), 4) for job, t in times.items()})
        result.update({f"{job}_s_min": round(min(t), 4) for job, t in times.items()})
        result.update({f"mean_len_{job}": n for job, n in lengths.items()})
        result.update({f"steps_{job}": n for job, n in steps.items()})
        result.update(device=args.device, att_masks=args.att_masks, torch=torch.__version__)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
