"""Summary of issue 37's seeds experiment (benchmarks/flickr8k_seeds.sh): the paper's CACA on
Flickr8k, three seeds per arm, as a markdown report.

For every run folder ``ARM_sSEED`` of OUT_DIR it reads the beam-3 val scores and results that
the lanes saved (``val_beam3.json``, ``val_beam3_results.json``), the training log (best epoch,
wall time) and, for CACA runs, the history weight per word position (``history/history_weight.json``,
``catcap analyze history``). It prints:

1. per arm and seed: BLEU-4, METEOR, ROUGE-L, CIDEr-D (x100), best epoch, training time and
   what trained it (``machine.jsonl``, written by ``catcap train`` since 2026-11-28: the CPU's
   instruction set, PyTorch, threads; "not recorded" for the runs before);
2. per arm: mean and sample standard deviation over the seeds;
3. paired bootstrap of every comparison in PAIRS on the *pooled* captions: each (image, seed)
   is one item, the arms paired on the same (image, seed) (1,000 resamples). Pooling is exact for
   CIDEr-D: each image's references appear once per seed, which scales every document frequency
   and the number of documents alike, so an item's CIDEr-D is its per-seed score;
4. the history weight per position (mean over seeds, layer 3 of 3), against the paper's Fig. 5
   (about 0.07 at the first word, about 0.2 later); ``--plot FILE.png`` draws those curves, one
   line per arm (catcap.viz.history_plots, as ``catcap analyze history`` draws one run's);
5. per CACA arm and decoder layer: the history weight at the first word, over all words, and the
   learned AWC target (lower layers from ``history_layerK/``, K = 0 the bottom).

Usage: python benchmarks/flickr8k_seeds.py [RUNS] [--refs data/flickr8k/dataset_flickr8k.json] [--plot FILE.png]
RUNS defaults to benchmarks/results/flickr8k_seeds, where the lanes record every finished run's
small files (committed, so the experiment outlives the machine that trained it); the lanes' OUT_DIR
(runs/flickr8k_seeds) works too. Arms without finished runs are left out (say which), so it runs on
a partial experiment too.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ARMS = ("transformer", "cat", "cat_literal", "cat_literal_noawc", "updown", "updown_caca",
        "transformer_scst", "cat_scst", "cat_literal_scst")
LABELS = {"transformer": "Transformer", "cat": "CAT (catcap's CACA: LayerNorm(c_tmp) entries)",
          "cat_literal": "CAT (the paper's CACA: c_tmp entries)", "cat_literal_noawc": "CAT (paper's CACA), no AWC",
          "updown": "Up-Down", "updown_caca": "Up-Down + CACA + AWC", "transformer_scst": "Transformer + SCST",
          "cat_scst": "CAT (catcap's CACA) + SCST", "cat_literal_scst": "CAT (paper's CACA) + SCST"}
PAIRS = (("transformer", "cat"), ("transformer", "cat_literal"), ("cat", "cat_literal"),
         ("cat_literal_noawc", "cat_literal"), ("updown", "updown_caca"),
         ("transformer_scst", "cat_scst"), ("transformer_scst", "cat_literal_scst"), ("cat_scst", "cat_literal_scst"))
METRICS = ("Bleu_4", "METEOR", "ROUGE_L", "CIDEr")


def runs_of(out: Path, arm: str) -> dict[int, Path]:
    """{seed: run folder} of the finished runs of ``arm`` (scored at beam 3)."""
    found = {}
    for run in sorted(out.glob(f"{arm}_s*")):
        seed = run.name[len(arm) + 2:]
        if seed.isdigit() and (run / "val_beam3.json").is_file() and (run / "val_beam3_results.json").is_file():
            found[int(seed)] = run
    return found


def training_summary(run: Path) -> tuple[str, str]:
    """(best epoch "e of n", training minutes) from a run's log.jsonl: the minutes add up each
    logged interval's steps over its logged rate (validation and scoring not included)."""
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
    vals = [r for r in records if r.get("kind") == "val" and "CIDEr" in r]
    if not vals:
        return "-", "-"
    best = max(vals, key=lambda r: r["CIDEr"])
    seconds, last = 0.0, 0
    for r in records:
        if r.get("kind") == "train" and r.get("batches_per_s"):
            seconds += (r["step"] - last) / r["batches_per_s"]
            last = r["step"]
    epochs = sum(r["epoch"] >= 0 for r in vals)  # an SCST run first scores its start (epoch -1)
    chosen = "start" if best["epoch"] < 0 else f"{best['epoch'] + 1}"
    return f"{chosen} of {epochs}", f"{seconds / 60:.0f}"


def machine_of(run: Path) -> str:
    """What trained a run, from its ``machine.jsonl`` (one line per start or resume): the CPU's
    model and instruction set (or the GPU), PyTorch and the thread count, each distinct one once."""
    path = run / "machine.jsonl"
    if not path.exists():
        return "not recorded"
    seen = []
    for line in path.read_text().splitlines():
        if line.strip():
            m = json.loads(line)
            cpu = f"{m['cpu']} ({m['cpu_capability']})" if m.get("cpu") else m["cpu_capability"]
            text = f"{m.get('gpu') or cpu}, torch {m['torch']}, {m['torch_threads']} thread(s)"
            if text not in seen:
                seen.append(text)
    return " then ".join(seen) or "not recorded"


def scores_table(out: Path, arms: list[str]) -> list[str]:
    lines = ["| arm | seed | BLEU-4 | METEOR | ROUGE-L | CIDEr-D | best epoch | minutes | machine |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        for seed, run in runs_of(out, arm).items():
            corpus = json.loads((run / "val_beam3.json").read_text())["corpus"]
            best, minutes = training_summary(run)
            cells = " | ".join(f"{100 * corpus[m]:.1f}" if m in corpus else "-" for m in METRICS)
            lines.append(f"| {LABELS[arm]} | {seed} | {cells} | {best} | {minutes} | {machine_of(run)} |")
    return lines


def mean_table(out: Path, arms: list[str]) -> list[str]:
    lines = ["| arm | seeds | BLEU-4 | METEOR | ROUGE-L | CIDEr-D |", "|---|---|---|---|---|---|"]
    for arm in arms:
        corpora = [json.loads((run / "val_beam3.json").read_text())["corpus"] for run in runs_of(out, arm).values()]
        cells = []
        for m in METRICS:
            values = [100 * c[m] for c in corpora if m in c]
            spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
            cells.append(f"{statistics.mean(values):.2f}{spread}" if values else "-")
        lines.append(f"| {LABELS[arm]} | {len(corpora)} | " + " | ".join(cells) + " |")
    return lines


def pooled(out: Path, arm: str, seeds: list[int], refs: dict) -> tuple[dict, dict]:
    """Candidates and references keyed by "image_id/seed" over ``seeds``."""
    cands, pooled_refs = {}, {}
    for seed in seeds:
        run = runs_of(out, arm)[seed]
        for row in json.loads((run / "val_beam3_results.json").read_text()):
            key = f"{row['image_id']}/{seed}"
            cands[key], pooled_refs[key] = row["caption"], refs[row["image_id"]]
    return cands, pooled_refs


def bootstrap_table(out: Path, arms: list[str], refs: dict) -> list[str]:
    from catcap.metrics.bootstrap import paired_bootstrap
    from catcap.metrics.evaluate import evaluate_captions

    lines = ["| A | B | seeds | metric | B - A (x100) | 95% CI | p |", "|---|---|---|---|---|---|---|"]
    for a, b in PAIRS:
        if a not in arms or b not in arms:
            continue
        seeds = sorted(set(runs_of(out, a)) & set(runs_of(out, b)))
        if not seeds:
            continue
        evals = []
        for arm in (a, b):
            cands, arm_refs = pooled(out, arm, seeds, refs)
            evals.append(evaluate_captions(cands, arm_refs, ["bleu", "rouge", "cider"]))
        for row in paired_bootstrap(*evals, resamples=1000, seed=0):
            if row.metric in ("Bleu_4", "CIDEr", "ROUGE_L"):
                lines.append(f"| {LABELS[a]} | {LABELS[b]} | {','.join(map(str, seeds))} | {row.metric} | "
                             f"{100 * row.diff:+.2f} | [{100 * row.low:+.2f}, {100 * row.high:+.2f}] | {row.p_value:.3f} |")
    return lines


def history_curves(out: Path, arm: str, folder: str = "history") -> list[dict]:
    """The history curve (``catcap analyze history``'s JSON, one checkpoint) in ``folder`` of each
    finished run of ``arm`` that has one: ``history`` the top decoder layer, ``history_layerK``
    layer K (0 = the bottom)."""
    files = [run / folder / "history_weight.json" for run in runs_of(out, arm).values()]
    return [json.loads(f.read_text())["checkpoints"][0] for f in files if f.is_file()]


def layer_table(out: Path, arms: list[str]) -> list[str]:
    """Per CACA arm and decoder layer (mean over its seeds): the history weight at the first word,
    its mean over words and the learned AWC target; which layers use the history, and how much."""
    lines = ["| arm | layer | seeds | a_1 | mean over words | AWC beta (mean over heads) |", "|---|---|---|---|---|---|"]
    for arm in arms:
        top = history_curves(out, arm)
        if not top:
            continue
        layers = top[0]["num_layers"]
        for k in range(layers):
            curves = top if k == layers - 1 else history_curves(out, arm, f"history_layer{k}")
            if not curves:
                continue
            betas = [statistics.mean(c["beta"]) for c in curves if c.get("beta")]
            lines.append(f"| {LABELS[arm]} | {k + 1} of {layers} | {len(curves)} | "
                         f"{statistics.mean(c['mean'][0] for c in curves):.3f} | "
                         f"{statistics.mean(c['overall'] for c in curves):.3f} | "
                         f"{f'{statistics.mean(betas):.3f}' if betas else '-'} |")
    return lines


def history_table(out: Path, arms: list[str]) -> list[str]:
    lines = ["| arm | seeds | a_1 | a_2 | a_3 | a_5 | a_8 | mean over words | AWC beta (mean over heads) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        curves = history_curves(out, arm)
        if not curves:
            continue
        cells = []
        for position in (1, 2, 3, 5, 8):
            values = [c["mean"][position - 1] for c in curves if len(c["mean"]) >= position]
            cells.append(f"{statistics.mean(values):.3f}" if values else "-")
        overall = statistics.mean(c["overall"] for c in curves)
        betas = [statistics.mean(c["beta"]) for c in curves if c.get("beta")]
        beta = f"{statistics.mean(betas):.3f}" if betas else "-"
        lines.append(f"| {LABELS[arm]} | {len(curves)} | " + " | ".join(cells) + f" | {overall:.3f} | {beta} |")
    return lines


def arm_curves(out: Path, arms: list[str]) -> list:
    """One HistoryCurve per CACA arm: its runs' curves averaged over seeds (positions all of
    them reached; images still generating summed; AWC targets averaged)."""
    import dataclasses

    from catcap.viz.history import HistoryCurve

    names = {f.name for f in dataclasses.fields(HistoryCurve)}
    result = []
    for arm in arms:
        runs = history_curves(out, arm)
        if not runs:
            continue
        length = min(len(c["mean"]) for c in runs)
        mean = [statistics.mean(c["mean"][k] for c in runs) for k in range(length)]
        betas = [b for c in runs if c.get("beta") for b in c["beta"]]
        fields = {k: v for k, v in runs[0].items() if k in names}
        fields.update(label=f"{LABELS[arm]} ({len(runs)} seed{'s' if len(runs) > 1 else ''})", mean=mean,
                      per_head=[mean], counts=[sum(c["counts"][k] for c in runs) for k in range(length)],
                      beta=[statistics.mean(betas)] if betas else None, captions={})
        result.append(HistoryCurve(**fields))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="benchmarks/results/flickr8k_seeds",
                        help="the recorded runs (the lanes' RECORD, default) or the lanes' OUT_DIR")
    parser.add_argument("--refs", default="data/flickr8k/dataset_flickr8k.json", help="the Karpathy file of the runs")
    parser.add_argument("--plot", type=Path, help="also draw the history weight per word position of every CACA arm here (PNG)")
    args = parser.parse_args()
    from catcap.data.karpathy import load_karpathy

    out = Path(args.out)
    refs = {r.image_id: r.raw for r in load_karpathy(args.refs, ["val"])["val"]}
    arms = [arm for arm in ARMS if runs_of(out, arm)]
    missing = [arm for arm in ARMS if arm not in arms]
    print(f"# Seeds experiment ({out}); arms without finished runs: {', '.join(missing) or 'none'}\n")
    for title, table in (("Per seed (val, 1,000 photos, beam 3, x100)", scores_table(out, arms)),
                         ("Mean ± standard deviation over seeds", mean_table(out, arms)),
                         ("Paired bootstrap on pooled captions (image x seed)", bootstrap_table(out, arms, refs)),
                         ("History weight per word position (top layer, 250 val photos, greedy)", history_table(out, arms)),
                         ("History weight per decoder layer (250 val photos, greedy)", layer_table(out, arms))):
        print(f"## {title}\n")
        print("\n".join(table) + "\n")
    curves = arm_curves(out, arms)
    if args.plot and curves:
        from catcap.viz.history_plots import plot_history_weight

        plot_history_weight(curves, args.plot, title="History weight per word position, mean over seeds (top layer, "
                                                      "250 val photos, greedy)\nthe paper's Fig. 5: about 0.07 at the "
                                                      "first word, about 0.2 later")
        print(f"plot: {args.plot}")
    elif args.plot:
        print("plot: no CACA run has a history curve yet")


if __name__ == "__main__":
    main()
