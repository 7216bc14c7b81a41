"""bf16-autocast vs fp32 greedy captions of a checkpoint's validation split (docs/distributed.md).

    .venv/bin/python benchmarks/studies/bf16_decoding.py runs/flickr8k/transformer/best
"""
import argparse
import time

import torch

from catcap.config import from_dict
from catcap.data.vocab import Vocab
from catcap.decoding import GenerationConfig
from catcap.metrics.evaluate import evaluate_tokenized
from catcap.training.checkpoint import load_checkpoint
from catcap.training.experiment import ExperimentConfig
from catcap.training.precision import Precision
from catcap.training.setup import make_model, prepare_data
from catcap.training.validate import decode_split

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("checkpoint", help="a checkpoint folder written by catcap train (e.g. runs/flickr8k/transformer/best)")
args = parser.parse_args()
ck = load_checkpoint(args.checkpoint)
cfg = from_dict(ExperimentConfig, ck["config"])
vocab = Vocab.from_dict(ck["vocab"])
data = prepare_data(cfg, vocab)
model = make_model(cfg, vocab); model.load_state_dict(ck["weights"]); model.eval()
dev = torch.device("cpu")
res = {}
for name in ("fp32", "bf16"):
    t = time.perf_counter()
    ids, cands, refs = decode_split(model, data.val, vocab, dev, 50, GenerationConfig(num_beams=1, max_length=20), autocast=Precision(name, dev).autocast)
    ev = evaluate_tokenized(ids, cands, refs, ("bleu", "cider"))
    res[name] = cands
    print(name, f"{time.perf_counter() - t:.1f} s", {k: round(v, 4) for k, v in ev.corpus.items()}, flush=True)
same = sum(a == b for a, b in zip(res["fp32"], res["bf16"]))
print(f"identical greedy captions: {same} of {len(res['fp32'])} ({same / len(res['fp32']):.1%})")
