"""Issue 39's target table on one card, in one run: catcap's decoding today (eager, a host read
per step), static and eager, and static as one CUDA graph, against our static reference decoder
(eager and graph, reference_decoder.py) and self-critical.pytorch's cached Transformer; an SCST
step; the CACA models' ratios to their bases; each target met or not.

Workload (decode.py's): random weights, vocab 10,000, 50 images x 50 regions x 2048-d, 16 words
with ``<eos>`` suppressed (every decode runs all steps), fp32, eval mode, no grad. Models:
configs/models/{transformer, cat, lightcat, m2, m2_caca}.yaml. Modes (``generate`` arguments):

    today    static=False                     the default eager loop (reads 'all finished' per step)
    static   static=True, cuda_graphs=False   static decoding, eager
    graphs   static=True, cuda_graphs=True    static decoding replayed as one CUDA graph (CUDA only)

SCST step (5 samples x 50 images, ``<eos>`` allowed, max 16 words, mean-of-samples baseline):
the trainer's own functions (training/scst.py, training/scst_graph.py): sampling in eval mode
under no_grad (mode today or graphs), then the update: one teacher-forced pass over the 250
captions with gradients (encoder once per image), the policy-gradient loss with fixed random
rewards, backward, clipping and a fused Adam step (today: eagerly; graphs: replayed as one CUDA
graph, the captions padded to 17 positions); the two phases are also timed alone ("scst sample",
"scst update"). The reward (CIDEr-D of 250 captions, on the CPU) is left out: it does not depend
on the mode. The SCST jobs run twice: in fp32 and under bf16 autocast ("scst bf16", as
``--precision bf16`` trains; the docs advise bf16 for training at the paper's size on a GPU).

``--profile`` adds a table: one call of each SCST job and of the greedy decodes under
torch.profiler, with the device's busy time (summed kernel times) against the wall time, so a
run shows whether a job is bound by its work or by launches and host work.

Timings are interleaved (each repeat times every job once, starting at a different one) and
CUDA-synchronised; medians of --repeats. The table goes to stdout and, with --out, to a markdown
file; every line of it is also printed as JSON. self-critical.pytorch: ``--sc DIR`` or
$CATCAP_SC_REFERENCE (a checkout; benchmarks/reference_sc.py loads it), skipped without one.

Usage (GPU): python benchmarks/gpu/targets.py --device cuda --out OUT/targets.md [--sc DIR]
Smoke (CPU): python benchmarks/gpu/targets.py --device cpu --quick (tiny models, 2 images, 4 words)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from reference_decoder import build as build_reference  # noqa: E402
from reference_decoder import runners as reference_runners  # noqa: E402
import workload  # noqa: E402

from catcap.config import load_config  # noqa: E402
from catcap.decoding import GenerationConfig, build_processors, generate  # noqa: E402
from catcap.decoding.graphs import GRAPHS  # noqa: E402
from catcap.models.builders import build_captioner  # noqa: E402
from catcap.training.experiment import ExperimentConfig  # noqa: E402
from catcap.training.precision import Precision  # noqa: E402
from catcap.training.scst import Drawn, chosen_mask, sequence_log_probs, update_loss  # noqa: E402
from catcap.training.scst_graph import UpdateGraphs  # noqa: E402
from catcap.training.setup import make_optimizer  # noqa: E402

MODELS = ("transformer", "cat", "lightcat", "m2", "m2_caca")
BASES = {"cat": "transformer", "lightcat": "transformer", "m2_caca": "m2"}
PRESETS = workload.PRESETS
PAPER = dict(vocab=workload.V, images=workload.B, regions=workload.N, features=workload.F, words=workload.T)
QUICK = dict(vocab=50, images=2, regions=5, features=24, words=4)
QUICK_MODEL = dict(d_model=32, num_heads=4, encoder_layers=2, decoder_layers=2, d_ff=64)
#: issue 39's targets: (what, measured name, bound); a ratio must be <= bound, a speed-up >= it
TARGETS = [("Transformer greedy / reference greedy graph", "transformer_greedy_over_reference", 1.3, "<="),
           ("Transformer beam 5 / reference beam graph", "transformer_beam_over_reference", 1.3, "<="),
           ("CAT / Transformer greedy", "cat_greedy_ratio", 1.30, "<="), ("CAT / Transformer beam", "cat_beam_ratio", 1.36, "<="),
           ("LightCAT / Transformer greedy", "lightcat_greedy_ratio", 1.30, "<="),
           ("LightCAT / Transformer beam", "lightcat_beam_ratio", 1.36, "<="),
           ("M2+CACA / M2 greedy", "m2_caca_greedy_ratio", 1.30, "<="), ("M2+CACA / M2 beam", "m2_caca_beam_ratio", 1.36, "<="),
           ("self-critical greedy / catcap Transformer greedy", "sc_greedy_speedup", 5.0, ">="),
           ("self-critical beam 5 / catcap Transformer beam 5", "sc_beam_speedup", 10.0, ">="),
           ("SCST step today / with graphs (Transformer)", "scst_speedup", 3.0, ">="),
           ("the same, both under bf16 autocast (--precision bf16)", "scst_bf16_speedup", 3.0, ">=")]


def catcap_model(name: str, size: dict, quick: bool, device: torch.device):
    cfg = load_config(ExperimentConfig, PRESETS / f"{name}.yaml").model
    if quick:
        cfg = dataclasses.replace(cfg, feature_dim=size["features"], **QUICK_MODEL)
    torch.manual_seed(0)
    return build_captioner(cfg, size["vocab"]).to(device).eval()


def catcap_jobs(name, model, features, mask, size, modes) -> dict:
    """{(model, job, mode): callable} for greedy and beam 5."""
    no_eos = build_processors(model.eos_id, suppress_eos=True)
    configs = {"greedy": GenerationConfig(num_beams=1, max_length=size["words"]),
               "beam": GenerationConfig(num_beams=5, max_length=size["words"])}
    flags = {"today": dict(static=False), "static": dict(static=True, cuda_graphs=False),
             "graphs": dict(static=True, cuda_graphs=True)}
    return {(name, job, mode): (lambda c=config, f=flags[mode]: generate(model, features, mask, c, processors=no_eos, **f))
            for job, config in configs.items() for mode in modes}


def scst_sample(model, features, mask, size, mode: str, amp: Precision):
    """SCST's sampling as the trainer draws it (training/scst.py draw_captions; training/scst_steps.py: under
    the run's autocast): 5 per image, eval mode, no grad; ``mode`` today = eager, graphs = static
    loop replayed as a CUDA graph."""
    config = GenerationConfig(do_sample=True, num_return_sequences=5, max_length=size["words"])
    flags = dict(static=False) if mode == "today" else dict(static=True, cuda_graphs=mode == "graphs")
    model.eval()
    with torch.no_grad(), amp.autocast():
        out = generate(model, features, mask, config, **flags)
    model.train()
    return out


def scst_update(graphs, model, features, mask, out, optimizer, rewards: torch.Tensor, graphed: bool):
    """SCST's update as the trainer makes it (training/scst_steps.py): one teacher-forced pass over the
    250 captions (encoder once per image), the mean-of-samples baseline, the policy loss,
    backward, gradient clipping (norm 1, the trainer's default) and fused Adam; ``graphed``:
    replayed as one CUDA graph (training/scst_graph.py), else eagerly."""
    advantage = rewards - rewards.view(-1, 5).mean(1).repeat_interleave(5)
    drawn = Drawn(out.tokens, chosen_mask(out.mask, graphs.length - 1), advantage, 5, {})
    params = list(model.parameters())

    def score(*args):
        return *sequence_log_probs(model, *args), None

    if graphed:
        graphs.update(score, model, optimizer, params, features, mask, drawn)
        if graphs.refused:
            raise RuntimeError(f"the SCST update could not be captured: {graphs.refused}")
        return
    optimizer.zero_grad(set_to_none=True)
    with graphs.precision.autocast():  # the trainer's eager step (training/scst_steps.py ScstSteps.eager)
        loss, _, _ = update_loss(score, features, mask, drawn)
    loss.backward()
    graphs.precision.step(optimizer, params, graphs.grad_clip, graphs.clip_mode)


def scst_jobs(model, features, mask, size, best: str, device, precision: str) -> dict:
    """{(transformer, scst | scst sample | scst update [+ " bf16"], mode): callable}: the whole step
    (module doc) and its two phases at ``precision`` (fp32, or bf16 autocast as the trainer runs
    ``--precision bf16``). Rewards are random numbers on the device: CIDEr-D is computed on the CPU
    from the captions and is not part of the GPU's work timed here. Adam takes one eager step
    first (its state exists before a graph is captured, as in the trainer)."""
    suffix = "" if precision == "fp32" else f" {precision}"
    rewards = torch.rand(features.shape[0] * 5, device=device)
    optimizer = make_optimizer(model.parameters(), device, lr=1e-9)
    graphs = UpdateGraphs(Precision(precision, device), 1.0, "norm", size["words"] + 1, 0)
    amp = graphs.precision
    drawn = scst_sample(model, features, mask, size, "today", amp)
    scst_update(graphs, model, features, mask, drawn, optimizer, rewards, graphed=False)
    jobs = {}
    for mode in ("today", best):
        graphed = mode == "graphs"
        jobs[("transformer", "scst" + suffix, mode)] = lambda m=mode, g=graphed: scst_update(
            graphs, model, features, mask, scst_sample(model, features, mask, size, m, amp), optimizer, rewards, g)
        jobs[("transformer", "scst sample" + suffix, mode)] = lambda m=mode: scst_sample(model, features, mask, size,
                                                                                         m, amp)
    jobs[("transformer", "scst update" + suffix, "eager")] = lambda: scst_update(graphs, model, features, mask, drawn,
                                                                                 optimizer, rewards, False)
    if best == "graphs":
        jobs[("transformer", "scst update" + suffix, "graphs")] = lambda: scst_update(
            graphs, model, features, mask, drawn, optimizer, rewards, True)
    return jobs


def busy(job, device: torch.device, top: int = 4) -> dict:
    """One call of ``job`` under torch.profiler: its wall time, the time the device spent in
    kernels (CUDA kernels, copies and sets; on a CPU, top-level ATen operators), their number and
    the ``top`` names that took longest. Busy close to wall: the work itself; far below it: launches
    and host work. Kernels inside a replayed CUDA graph are counted where the CUDA driver reports
    them (then the "kernels" column is > 0 for a graphs row)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        job()
        sync()
        wall = time.perf_counter() - start
    if cuda:
        spans = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA]
    else:
        spans = [(e.name, e.time_range.elapsed_us()) for e in prof.events()
                 if e.cpu_parent is None and e.name.startswith("aten::")]
    return dict(wall_ms=wall * 1000, **kernel_summary(spans, top))


def profile_jobs(jobs: dict, device: torch.device) -> dict:
    """:func:`busy` of every job and its arithmetic (GFLOP, counted by torch's FlopCounterMode on a
    call that is not a graph replay: a replay dispatches no operators, so a graphs row takes the
    count of the same job's other mode). A job the profiler fails on gets its error instead (the
    target table must not be lost to the profiler)."""
    from torch.utils.flop_counter import FlopCounterMode

    out, gflop = {}, {}
    for key, job in jobs.items():
        try:
            out[key] = busy(job, device)
            if key[2] != "graphs" and key[:2] not in gflop:
                with FlopCounterMode(display=False) as counter:
                    job()
                gflop[key[:2]] = counter.get_total_flops() / 1e9
        except Exception as err:  # noqa: BLE001 (any profiler failure is reported in the table)
            out[key] = {"error": f"{type(err).__name__}: {err}"[:200]}
    for key, r in out.items():
        if "error" not in r:
            r["gflop"] = gflop.get(key[:2])
    return out


def kernel_summary(spans: list[tuple[str, float]], top: int) -> dict:
    """(name, microseconds) pairs -> busy ms, their count and the ``top`` names by summed time
    (name shortened to 60 characters: CUDA kernel names are long templates)."""
    by_name: dict[str, float] = {}
    for name, us in spans:
        by_name[name[:60]] = by_name.get(name[:60], 0.0) + us
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    return dict(busy_ms=sum(us for _, us in spans) / 1000, kernels=len(spans),
                top=[(name, round(us / 1000, 3)) for name, us in ranked])


def busy_table(rows: dict, seconds: dict) -> str:
    """Markdown for :func:`profile_jobs` results by (model, job, mode), with the job's median time
    from the timed run and the arithmetic rate it reached (GFLOP / median)."""
    lines = ["| model | job | mode | median ms | wall ms (profiled) | device busy ms | kernels | GFLOP | TFLOP/s | "
             "longest (ms) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in rows.items():
        m, j, mode = key
        if "error" in r:
            lines.append(f"| {m} | {j} | {mode} | profiler failed: {r['error']} | | | | | | |")
            continue
        median = seconds.get(key)
        rate = f"{r['gflop'] / median / 1000:.3g}" if median and r["gflop"] else "-"
        gflop = f"{r['gflop']:.3g}" if r["gflop"] is not None else "-"
        longest = "; ".join(f"`{name}` {ms}" for name, ms in r["top"])
        lines.append(f"| {m} | {j} | {mode} | {median * 1000 if median else float('nan'):.2f} | {r['wall_ms']:.2f} | "
                     f"{r['busy_ms']:.2f} | {r['kernels']} | {gflop} | {rate} | {longest} |")
    return "\n".join(lines) + "\n"


def self_critical(root: Path, features, device, size):
    """self-critical.pytorch's cached Transformer on the same features: {(sc, job, eager): callable}."""
    import torch.nn.functional as F

    import reference_sc

    model_cls = reference_sc.load_reference(root)
    captions = torch.randint(4, size["vocab"], (features.shape[0], size["words"] + 2), device=device)
    ref = reference_sc.Reference(model_cls, features, captions)
    ref.model.to(device)
    proj = ref.model.model.generator.proj
    penalty = torch.zeros(size["vocab"], device=device)
    penalty[0] = reference_sc.NO_EOS
    ref.model.logit = lambda x: F.linear(x, proj.weight, proj.bias + penalty)
    return {("self-critical", "greedy", "eager"): ref.greedy, ("self-critical", "beam", "eager"): ref.beam}


def interleaved(jobs: dict, device: torch.device, repeats: int) -> dict:
    """Median seconds of every job, each repeat timing all of them from a rotating start."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    names, times = list(jobs), {name: [] for name in jobs}
    for name in names:  # warm-up (and the CUDA graph captures)
        jobs[name]()
    sync()
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            start = time.perf_counter()
            jobs[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def derived(seconds: dict, best: str) -> dict:
    """The targets' measured values from the medians (``best``: catcap's mode judged)."""
    out = {}
    def get(*key):
        return seconds.get(key)
    for job in ("greedy", "beam"):
        ref, mine = get("reference", job, "graph"), get("transformer", job, best)
        if ref and mine:
            out[f"transformer_{job}_over_reference"] = mine / ref
        for model, base in BASES.items():
            if get(model, job, best) and get(base, job, best):
                out[f"{model}_{job}_ratio"] = get(model, job, best) / get(base, job, best)
        if get("self-critical", job, "eager") and mine:
            out[f"sc_{job}_speedup"] = get("self-critical", job, "eager") / mine
    for suffix, key in (("", "scst_speedup"), (" bf16", "scst_bf16_speedup")):
        if get("transformer", "scst" + suffix, "today") and get("transformer", "scst" + suffix, best):
            out[key] = get("transformer", "scst" + suffix, "today") / get("transformer", "scst" + suffix, best)
    return out


def table(seconds: dict, values: dict, header: str, judged: bool) -> str:
    """Markdown: every median, then every target (``judged``: a paper-size CUDA run; else the
    values are printed but no target is called met or not)."""
    lines = [header, "", "| model | job | mode | ms |", "|---|---|---|---|"]
    lines += [f"| {m} | {j} | {mode} | {s * 1000:.2f} |" for (m, j, mode), s in seconds.items()]
    lines += ["", "| target | measured | bound | met |", "|---|---|---|---|"]
    for what, key, bound, sense in TARGETS:
        if key not in values:
            lines.append(f"| {what} | not measured | {sense} {bound} | - |")
            continue
        met = values[key] <= bound if sense == "<=" else values[key] >= bound
        verdict = ("yes" if met else "NO") if judged else "not judged (smoke run: CPU or --quick)"
        lines.append(f"| {what} | {values[key]:.3f} | {sense} {bound} | {verdict} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="tiny models and inputs (a smoke run, e.g. on a CPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--sc", type=Path, default=os.environ.get("CATCAP_SC_REFERENCE"),
                        help="self-critical.pytorch checkout (default $CATCAP_SC_REFERENCE; skipped without)")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one call of each SCST job and of the Transformer's and the reference's "
                             "greedy decodes: device busy time against wall time, kernel count, GFLOP, TFLOP/s, the "
                             "longest kernels (a table after the targets)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device, size = torch.device(args.device), QUICK if args.quick else PAPER
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # fp32 products
    modes = ("today", "static", "graphs") if device.type == "cuda" else ("today", "static")
    best = "graphs" if device.type == "cuda" else "static"
    reference, ref_features, ref_mask, _ = build_reference(device, args.quick)
    features, mask = ref_features, ref_mask  # the same inputs for every decoder
    jobs = {("reference",) + key: fn for key, fn in reference_runners(reference, features, mask, device).items()}
    models = {name: catcap_model(name, size, args.quick, device) for name in args.models}
    GRAPHS.max_graphs = 2 * len(models) + 2  # every graphed job (greedy, beam, SCST sampling in fp32 and bf16) stays captured
    for name, model in models.items():
        jobs.update(catcap_jobs(name, model, features, mask, size, modes))
    if args.sc and Path(args.sc).is_dir() and not args.quick:
        jobs.update(self_critical(Path(args.sc), features, device, size))
    else:
        why = "--quick" if args.quick else f"no directory at {args.sc}" if args.sc else "no checkout (--sc DIR)"
        print(json.dumps({"self_critical": "skipped", "why": why}))
    with torch.no_grad():
        seconds = interleaved(jobs, device, args.repeats)
    scst = {}
    if "transformer" in models:
        for precision in ("fp32", "bf16"):
            scst[precision] = scst_jobs(models["transformer"], features, mask, size, best, device, precision)
            seconds.update(interleaved(scst[precision], device, args.repeats))
    values = derived(seconds, best)
    print(json.dumps({"graph_captures": GRAPHS.captures, "recaptures": GRAPHS.recaptures}))
    for key, s in seconds.items():
        print(json.dumps({"model": key[0], "job": key[1], "mode": key[2], "ms": round(s * 1000, 3)}))
    print(json.dumps({"derived": {k: round(v, 4) for k, v in values.items()}, "judged_mode": best}))
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    text = table(seconds, values, f"### {card}, torch {torch.__version__}, {'quick' if args.quick else 'paper size'}, "
                                  f"{args.repeats} repeats, catcap judged in mode `{best}` "
                                  f"({GRAPHS.captures} graph captures, {GRAPHS.recaptures} of them again)",
                 judged=device.type == "cuda" and not args.quick)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.profile:  # after the table is written: a run cut short by its time limit keeps the targets
        section = profile_section(scst, jobs, models, device, seconds)
        print(section)
        if args.out:
            args.out.write_text(text + section)


def profile_section(scst: dict, jobs: dict, models: dict, device: torch.device, seconds: dict) -> str:
    """--profile: :func:`profile_jobs` of every SCST job (both precisions) and of the greedy
    decodes of the Transformer and the reference, as JSON lines and a markdown section."""
    profiled = {}
    for precision_jobs in scst.values():
        profiled.update(profile_jobs(precision_jobs, device))
    for model in models.values():
        model.eval()  # the SCST jobs leave the model in train mode; the decodes were timed in eval mode
    greedy = {k: v for k, v in jobs.items() if k[:2] in (("transformer", "greedy"), ("reference", "greedy"))}
    with torch.no_grad():
        profiled.update(profile_jobs(greedy, device))
    for key, r in profiled.items():
        print(json.dumps({"model": key[0], "job": key[1], "mode": key[2], "profile": r}))
    return "\n#### One call of each job under torch.profiler (--profile)\n\n" + busy_table(profiled, seconds)


if __name__ == "__main__":
    main()
