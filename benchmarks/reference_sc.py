"""catcap's paper-size Transformer against the public reference code, timed side by side.

The reference is the cached Transformer captioner of ruotianluo/self-critical.pytorch
(``captioning/models/cachedTransformer.py``: the decoder keeps each layer's keys and values
between steps, as catcap does), imported at run time from a checkout; nothing of it is copied
into this repository. Both run in one process on ``decode.py``'s workload: random weights
(seed 0), 50 images x 50 regions x 2048-d features, D=512, 8 heads, 3+3 layers, d_ff 2048,
16 words with the end token never chosen, so that every decode runs all 16 steps. Jobs:
  greedy      catcap's ``greedy``; the reference's ``_sample`` (sample_method greedy, beam_size 1)
  beam        beam 5: catcap's ``beam_search``; the reference's ``_sample_beam`` (its batched
              ``CaptionModel.beam_search`` with group_size 1, i.e. plain beam search)
  train_step  one XE step on 50 captions of 16 words (+ end token): forward, cross-entropy,
              backward, Adam step. catcap: ``decode.Bench.train_step`` (fused Adam); reference:
              its ``_forward`` (log-probabilities), the mean negative log-likelihood of every
              target (its LanguageModelCriterion with an all-ones mask, written as F.nll_loss)
              and its Transformer recipe's optimizer (``get_std_opt``: NoamOpt over torch Adam)
Decoding runs in eval mode under no_grad, training in train mode (dropout 0.1), one thread.
Each repeat times catcap then the reference, the next repeat the other order (after one
warm-up each: ``decode.interleaved``). Prints one JSON line per job: {"job", "catcap_s",
"reference_s", "reference_over_catcap", "repeats", "threads", "reference_commit"}: medians,
and the median over repeats of the ratio within a repeat (``decode.paired_ratio``). Every
timed decode is checked to have produced 16 words per caption.

How the reference is set up (the checkout is never edited):
- End token: index 0 is the reference's <bos>/<eos>/<pad>. For decoding, the model's
  ``logit`` (its generator's projection) is replaced on the instance by the same projection
  with -1e9 added to the bias of logit 0, so <eos> is never chosen; training uses the plain
  projection (the generator's own forward).
- Vocabulary: ``vocab_size`` 9,999 words + the index 0, i.e. 10,000 output logits like
  catcap's V = 10,000 (which counts its special tokens); the words are decode.py's ids 4..9999.
- Masks: none passed (``att_masks=None``), as its data loader does when all regions are real.
- Fc features: a zero (B, 2048) tensor; the Transformer only reads its batch size.
- Imports: only cachedTransformer.py and what it imports (AttModel, CaptionModel, FCModel,
  models/utils, utils/misc). ``captioning.models`` is registered as a bare package so its
  ``__init__.py`` (which imports every model, BERT's included) does not run. ``six`` (used by
  utils/misc.py for pickling only) is stubbed in ``sys.modules`` by ``_six_stand_in`` when it
  is not installed: ``six.PY3 = True`` and ``six.moves.cPickle = pickle``.

Get the reference (any folder outside the repository):
    git clone https://github.com/ruotianluo/self-critical.pytorch /tmp/sc_ref
Usage: python benchmarks/reference_sc.py --reference DIR [--repeats 5] [--reference-commit SHA]
       CATCAP_SC_REFERENCE=DIR python benchmarks/reference_sc.py
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from decode import Bench, interleaved, paired_ratio
from workload import JOBS, B, N, T, V
from workload import F as FEAT  # F: torch.nn.functional here

MODEL_FILE = Path("captioning") / "models" / "cachedTransformer.py"
GET_IT = ("git clone https://github.com/ruotianluo/self-critical.pytorch DIR, then pass --reference DIR "
          "(or set CATCAP_SC_REFERENCE=DIR)")
NO_EOS = -1e9  # added to logit 0 (<eos>) while decoding
OPTIONS = {"caption_model": "transformer", "vocab_size": V - 1, "input_encoding_size": 512, "rnn_size": 2048,
           "num_layers": 3, "N_enc": 3, "N_dec": 3, "d_model": 512, "d_ff": 2048, "num_att_heads": 8,
           "dropout": 0.1, "drop_prob_lm": 0.5, "att_feat_size": FEAT, "fc_feat_size": FEAT, "att_hid_size": 512,
           "use_bn": 0, "seq_length": T, "max_length": T}
DECODE = {"sample_method": "greedy", "group_size": 1, "sample_n": 1, "temperature": 1.0}


def reference_root(arg: Path | None) -> Path:
    root = arg or (Path(os.environ["CATCAP_SC_REFERENCE"]) if os.environ.get("CATCAP_SC_REFERENCE") else None)
    if root is None or not (root / MODEL_FILE).is_file():
        where = f"no {MODEL_FILE} under {root}" if root else "no reference checkout given"
        sys.exit(f"{where}: {GET_IT}")
    return root.resolve()


def reference_commit(root: Path, given: str | None) -> str:
    if given:
        return given
    if (root / ".git").exists():
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0:
            return done.stdout.strip()
    return "unknown (pass --reference-commit)"


def _six_stand_in() -> None:
    """Minimal ``six`` for utils/misc.py, which only uses six.PY3 and six.moves.cPickle."""
    six, moves = types.ModuleType("six"), types.ModuleType("six.moves")
    six.PY3, six.moves, moves.cPickle = True, moves, pickle
    sys.modules["six"], sys.modules["six.moves"] = six, moves


def load_reference(root: Path) -> type:
    """The reference's cached TransformerModel class, imported without captioning/models/__init__."""
    try:
        importlib.import_module("six")
    except ImportError:
        _six_stand_in()
    sys.path.insert(0, str(root))
    importlib.import_module("captioning")
    models = types.ModuleType("captioning.models")  # bare package: skip __init__.py's other models
    models.__path__ = [str(root / MODEL_FILE.parent)]
    sys.modules["captioning.models"] = models
    return importlib.import_module("captioning.models.cachedTransformer").TransformerModel


class Reference:
    """The reference model, its optimizer and the three jobs on decode.py's inputs."""

    name = "reference"

    def __init__(self, model_cls: type, feats: torch.Tensor, captions: torch.Tensor):
        vocab = {str(i): f"w{i}" for i in range(1, V)}
        torch.manual_seed(0)
        self.model = model_cls(argparse.Namespace(**OPTIONS, vocab=vocab))
        self.opt = sys.modules["captioning.utils.misc"].get_std_opt(self.model, "adam", factor=1, warmup=20000)
        self.att, self.fc = feats, feats.new_zeros(B, FEAT)
        self.labels = captions.clone()
        self.labels[:, 0] = self.labels[:, -1] = 0  # its <bos> and <eos>
        proj = self.model.model.generator.proj
        penalty = torch.zeros(V).index_fill_(0, torch.tensor([0]), NO_EOS)
        self.model.logit = lambda x: F.linear(x, proj.weight, proj.bias + penalty)
        self.last = None

    def greedy(self):
        self._decode(beam_size=1)

    def beam(self):
        self._decode(beam_size=5)

    def _decode(self, beam_size: int):
        self.model.eval()
        with torch.no_grad():
            self.last, _ = self.model(self.fc, self.att, None, opt=dict(DECODE, beam_size=beam_size), mode="sample")

    def train_step(self):
        self.model.train()
        log_probs = self.model(self.fc, self.att, self.labels[:, :-1], None)
        loss = F.nll_loss(log_probs.reshape(-1, V), self.labels[:, 1:].reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def words(self) -> int:
        """Words per caption of the last decode (tokens before the first 0), the same for all."""
        counts = (self.last > 0).long().cumprod(dim=1).sum(dim=1)
        return int(counts.min()) if int(counts.min()) == int(counts.max()) else -1

    def sync(self):
        pass


class Catcap(Bench):
    """decode.Bench that keeps its last decode's output, to count its words."""

    def _decode(self, fn, **kw):
        def keep(*args, **kwargs):
            self.last = fn(*args, **kwargs)
            return self.last

        super()._decode(keep, **kw)

    def words(self) -> int:
        words = self.last.lengths - 1  # lengths count the final <eos>
        return int(words.min()) if int(words.min()) == int(words.max()) else -1


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """decode.py's features, mask and captions (<bos>=1, 16 words, <eos>=2), same seed."""
    torch.manual_seed(0)
    feats, mask = torch.randn(B, N, FEAT), torch.ones(B, N, dtype=torch.bool)
    captions = torch.randint(4, V, (B, T + 2))
    captions[:, 0], captions[:, -1] = 1, 2
    return feats, mask, captions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, help="checkout of self-critical.pytorch (else $CATCAP_SC_REFERENCE)")
    parser.add_argument("--reference-commit", help="the checkout's commit, when it has no .git")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    args = parser.parse_args()
    root = reference_root(args.reference)
    commit = reference_commit(root, args.reference_commit)
    torch.set_num_threads(1)
    feats, mask, captions = inputs()
    catcap = Catcap("transformer", (feats, mask, captions), torch.device("cpu"))
    reference = Reference(load_reference(root), feats, captions)
    for job in args.jobs:
        times = interleaved([catcap, reference], job, args.repeats)
        if job != "train_step" and (catcap.words(), reference.words()) != (T, T):
            sys.exit(f"{job}: {catcap.words()} (catcap) and {reference.words()} (reference) words, not {T}")
        print(json.dumps({"job": job, "catcap_s": round(statistics.median(times[catcap.name]), 4),
                          "reference_s": round(statistics.median(times[reference.name]), 4),
                          "reference_over_catcap": paired_ratio(times[reference.name], times[catcap.name]),
                          "repeats": args.repeats, "threads": torch.get_num_threads(),
                          "reference_commit": commit}), flush=True)


if __name__ == "__main__":
    main()
