"""Decoding and training-step speed at the paper's size (issues 3 and 4).

Paper preset (D=512, H=8, 3+3 layers, d_ff 2048) with random weights, vocab 10,000,
50 images x 50 regions x 2048-d features, max length 16, eval mode, no grad. Greedy and
beam-5 decoding always run the full 16 steps (``<eos>`` suppressed) so runs compare; one XE
training step on 50 captions of 16 words (plus the AWC term for presets that enable it, as in
training), with the trainer's optimizer (fused Adam). Several models are measured in one run,
interleaved (each repeat times every model in turn) so that drifting machine load affects them
alike. Prints one JSON line per model and thread count:
{"model", "greedy_s", "beam_s", "train_step_s", "threads", ...} (medians of --repeats runs,
plus the minimum of each and, for every model but the first, its ratio to the first: the
median over repeats of the ratio within a repeat, which drifting load affects least; and
``*_ratio_to`` the same against every other earlier model, e.g. ``--models transformer m2
m2_caca`` gives M2 + CACA against M2 too).

Usage: python benchmarks/decode.py [--threads 1 2] [--repeats 5] [--models transformer cat lightcat] [--jobs beam]
       python benchmarks/decode.py --threads 1 --models transformer m2 m2_caca m2_light_caca
       python benchmarks/decode.py --threads 1 --models transformer updown updown_caca updown_light_caca
       python benchmarks/decode.py --device cuda --precision fp32 bf16 --models transformer cat lightcat

On a GPU (``--device cuda``) every timing is bracketed by ``torch.cuda.synchronize()``; with
``--precision bf16`` (or fp16) decoding and the training step's forward run under autocast
(``catcap.training.precision``; fp16 with its gradient scaler), as ``catcap train`` runs them.
On CPU, fp32 Linear layers run through oneDNN or MKL as ``catcap.models.linear`` decides
(the ``gemm`` field says which); ``CATCAP_CPU_GEMM=torch`` forces PyTorch's own (MKL)
products, e.g. to compare the two. ``--malloc catcap`` (the default) raises glibc's malloc
thresholds as every ``catcap`` command does (``catcap.malloc``), ``--malloc system`` keeps glibc's
defaults; the ``malloc`` field says which was in effect. The paper's numbers (TITAN Xp, 50 images): Transformer 4.7 ms greedy / 63.9 ms beam,
CAT 6.1 / 86.6 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from catcap.config import load_config
from catcap.decoding import beam_search, build_processors, greedy
from catcap.malloc import CHOICES, keep_freed_memory
from catcap.models.builders import build_captioner
from catcap.models.linear import cpu_gemm_backend
from catcap.training.awc import make_awc
from catcap.training.experiment import ExperimentConfig
from catcap.training.losses import cross_entropy
from catcap.training.precision import Precision
from catcap.training.setup import make_optimizer
from workload import JOBS, PRESETS, B, F, N, T, V



class Bench:
    """One preset's model, optimizer and timed jobs on shared inputs."""

    def __init__(self, name: str, inputs, device: torch.device, precision: str = "fp32"):
        self.name, self.device = name, device
        cfg = load_config(ExperimentConfig, PRESETS / f"{name}.yaml")
        torch.manual_seed(0)
        self.model = build_captioner(cfg.model, V).to(device)
        self.awc = make_awc(cfg)
        if self.awc is not None:
            self.awc.to(device)
        self.params = list(self.model.parameters()) + (list(self.awc.parameters()) if self.awc else [])
        self.opt = make_optimizer(self.params, device, lr=1e-4)
        self.precision = Precision("bf16" if precision == "bf16-weights" else precision, device)
        self.feats, self.mask, self.captions = (x.to(device) for x in inputs)
        self.no_eos = build_processors(self.model.eos_id, suppress_eos=True)
        self.decoder_model, self.decoder_feats = self.model, self.feats
        if precision == "bf16-weights":  # decoding as `catcap evaluate --dtype bf16` runs it
            import copy

            self.decoder_model = copy.deepcopy(self.model).to(torch.bfloat16)
            self.decoder_feats = self.feats.to(torch.bfloat16)

    def greedy(self):
        self._decode(greedy)

    def beam(self):
        self._decode(beam_search, beam_size=5)

    def _decode(self, fn, **kw):
        self.decoder_model.eval()
        if self.decoder_model is not self.model:  # bf16 weights, no autocast
            with torch.no_grad():
                fn(self.decoder_model, self.decoder_feats, self.mask, max_len=T, processors=self.no_eos, **kw)
            return
        with torch.no_grad(), self.precision.autocast():
            fn(self.model, self.feats, self.mask, max_len=T, processors=self.no_eos, **kw)

    def train_step(self):
        self.model.train()
        cmask = torch.ones_like(self.captions, dtype=torch.bool)
        with self.precision.autocast():
            logits, extras = self.model(self.feats, self.mask, self.captions, cmask)
            loss = cross_entropy(logits, self.captions[:, 1:], cmask[:, 1:])
            if self.awc is not None:
                loss = loss + self.awc(extras, cmask[:, :-1])
        self.opt.zero_grad()
        self.precision.backward(loss)
        self.precision.step(self.opt, self.params, 0.0)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def interleaved(benches: list[Bench], job: str, repeats: int) -> dict[str, list[float]]:
    """Seconds per run of ``job`` for every bench, each repeat timing every bench in turn
    (starting with a different one each repeat, so that none is always first)."""
    times = {b.name: [] for b in benches}
    for b in benches:
        getattr(b, job)()  # warm-up
        b.sync()
    for r in range(repeats):
        for b in benches[r % len(benches):] + benches[:r % len(benches)]:
            b.sync()
            start = time.perf_counter()
            getattr(b, job)()
            b.sync()
            times[b.name].append(time.perf_counter() - start)
    return times


def paired_ratio(times: list[float], baseline: list[float]) -> float:
    """Median over repeats of the ratio within a repeat (drifting load affects it least)."""
    return round(statistics.median(t / t0 for t, t0 in zip(times, baseline)), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=["transformer"],
                        help="model presets (configs/models/NAME.yaml), e.g. transformer cat lightcat")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16", "fp16", "bf16-weights"],
                        help="bf16/fp16: autocast (as catcap train); bf16-weights: decoding with the weights "
                             "in bf16 (as catcap evaluate --dtype bf16), the training step under bf16 autocast")
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS,
                        help="time only these jobs (e.g. `--jobs beam` under a profiler)")
    parser.add_argument("--floors", action="store_true",
                        help="also time each job's matrix products and attention kernels alone (gemm_floor.py) "
                             "in this run, one thread, paired with the Transformer's job in every repeat, and "
                             "print its ratio to them (first model: transformer)")
    add_malloc_argument(parser)
    args = parser.parse_args()
    args.malloc_applied = keep_freed_memory(args.malloc)
    device = torch.device(args.device)
    torch.manual_seed(0)
    feats, mask = torch.randn(B, N, F), torch.ones(B, N, dtype=torch.bool)
    captions = torch.randint(4, V, (B, T + 2))
    captions[:, 0], captions[:, -1] = 1, 2
    if device.type == "cuda":
        print(json.dumps({"device": torch.cuda.get_device_name(device), "torch": torch.__version__}), flush=True)
    for precision in args.precision:
        benches = [Bench(name, (feats, mask, captions), device, precision) for name in args.models]
        run(benches, args, precision)


def add_malloc_argument(parser: argparse.ArgumentParser) -> None:
    """``--malloc catcap|system`` (catcap.malloc), as decode.py and decode_levers.py take it."""
    parser.add_argument("--malloc", choices=CHOICES, default="catcap",
                        help="catcap: glibc keeps freed memory for reuse, as the catcap commands run (default); "
                             "system: glibc's defaults (catcap/malloc.py)")


def run(benches: list[Bench], args, precision: str) -> None:
    for threads in args.threads if args.device == "cpu" else [torch.get_num_threads()]:
        torch.set_num_threads(threads)
        timed = {job: interleaved(benches, job, args.repeats) for job in args.jobs}
        first = benches[0].name
        for b in benches:
            decoder = b.model.decoder  # a recurrent decoder has one soft attention, a Transformer one per layer
            attention = getattr(decoder, "attention", None) or getattr(decoder.layers[0], "cross", None)
            result = {"model": b.name, "cross_attention": type(attention).__name__ if attention else "none (one stream)"}
            for job in args.jobs:
                median = statistics.median(timed[job][b.name])
                result[f"{job}_s"], result[f"{job}_min_s"] = round(median, 4), round(min(timed[job][b.name]), 4)
                if b.name != first:  # paired: the ratio within each repeat, then its median
                    result[f"{job}_ratio"] = paired_ratio(timed[job][b.name], timed[job][first])
                    earlier = [e.name for e in benches[1:benches.index(b)]]
                    if earlier:  # e.g. M2 + CACA against M2 as well as against the first model
                        result[f"{job}_ratio_to"] = {e: paired_ratio(timed[job][b.name], timed[job][e]) for e in earlier}
            result["threads"], result["device"], result["precision"] = threads, args.device, precision
            if args.device == "cpu":
                result["gemm"] = cpu_gemm_backend()
                result["malloc"] = "catcap" if args.malloc_applied else "system"
            if args.floors and b is benches[0] and threads == 1:
                add_floors(result, args, b)
            print(json.dumps(result), flush=True)


def add_floors(result: dict, args, bench: Bench) -> None:
    """The paper-size Transformer's floors, paired with its own job times: in every repeat the
    job runs once and its matrix products alone (gemm_floor.py, 10 calls per shape) and attention
    kernels alone (5 per shape) are timed right after it or right before it (alternating), so
    that the VM's drift between runs moves a job and its floor together. Fields:
    ``{job}_floor_s`` and ``{job}_attention_floor_s`` (medians), ``{job}_paired_s`` (the job's
    median in these repeats), ``{job}_floor_ratio`` and ``{job}_floor_ratio_with_attention``
    (medians of the per-repeat ratios to the products, and to products + attention)."""
    from gemm_floor import attention_floor, floor

    if result["model"] != "transformer" or args.device != "cpu":
        raise SystemExit("--floors needs --device cpu and transformer as the first model: the floors are its products")
    for job in args.jobs:
        times, products, attention = [], [], []
        for r in range(args.repeats):
            for part in (("job", "floor") if r % 2 == 0 else ("floor", "job")):
                if part == "job":
                    start = time.perf_counter()
                    getattr(bench, job)()
                    times.append(time.perf_counter() - start)
                else:
                    products.append(floor(job, 10)[0])
                    attention.append(attention_floor(job, 5))
        result[f"{job}_floor_s"] = round(statistics.median(products), 4)
        result[f"{job}_attention_floor_s"] = round(statistics.median(attention), 4)
        result[f"{job}_paired_s"] = round(statistics.median(times), 4)
        result[f"{job}_floor_ratio"] = round(statistics.median(t / p for t, p in zip(times, products)), 3)
        result[f"{job}_floor_ratio_with_attention"] = round(
            statistics.median(t / (p + a) for t, p, a in zip(times, products, attention)), 3)


if __name__ == "__main__":
    main()
