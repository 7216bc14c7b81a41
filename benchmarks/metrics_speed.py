"""Speed of catcap.metrics against pycocoevalcap 1.2, with a check that numbers agree.

Two measurements (issue 2):
  A. evaluation: tokenise + BLEU + ROUGE-L + CIDEr-D for 1,000 COCO val2014 images, one
     held-out human caption against 5 references each; catcap vs pycocoevalcap (its Java
     PTB tokenizer + Bleu + Rouge + Cider). Target: catcap >= 10x faster, same numbers.
  B. self-critical reward: 50 images x 6 candidates (5 samples + 1 greedy) against 5
     references each, document frequencies from 5,000 train2014 images; one core.
     Target: <= 0.03 s per call.

  C. (--with-meteor) the toolkit's set without SPICE (BLEU, METEOR, ROUGE-L, CIDEr-D) on
     5,000 val2014 images, one run each, catcap vs pycocoevalcap, Java start-up included.

Usage: python benchmarks/metrics_speed.py [--repeats 5] [--with-meteor]   (prints a Markdown table)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from coco_text import captions_by_image  # noqa: E402

from catcap.metrics.cider import CiderD  # noqa: E402
from catcap.metrics.docfreq import DocumentFrequency  # noqa: E402
from catcap.metrics.evaluate import evaluate_captions  # noqa: E402
from catcap.metrics.tokenizer import ptb_tokenize  # noqa: E402


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), out


def toolkit_eval(results, references):
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tok = PTBTokenizer()
    gts = tok.tokenize({k: [{"caption": c} for c in v] for k, v in references.items()})
    res = tok.tokenize({k: [{"caption": results[k]}] for k in references})
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[0]
    return {"Bleu_1": bleu[0], "Bleu_4": bleu[3], "ROUGE_L": Rouge().compute_score(gts, res)[0],
            "CIDEr": Cider().compute_score(gts, res)[0]}


def bench_evaluation(val, repeats):
    ids = [i for i, caps in val.items() if len(caps) >= 6][:1000]
    results = {i: val[i][0] for i in ids}
    references = {i: val[i][1:6] for i in ids}
    t_ours, best_ours, ev = timed(lambda: evaluate_captions(results, references, "bleu,rouge,cider"), repeats)
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        t_ref, best_ref, ref = timed(lambda: toolkit_eval(results, references), repeats)
    diff = max(abs(ev.corpus[k] - v) for k, v in ref.items())
    return [("A. tokenise+BLEU+ROUGE-L+CIDEr-D, 1,000 images x 5 refs", f"{t_ref:.3f} s", f"{t_ours:.4f} s",
             f"{t_ref / t_ours:.1f}x", f"{diff:.1e}")], ev.corpus


def bench_full(val):
    from pycocoevalcap.meteor.meteor import Meteor

    ids = [i for i, caps in val.items() if len(caps) >= 6][:5000]
    results = {i: val[i][0] for i in ids}
    references = {i: val[i][1:6] for i in ids}
    t_ours, _, ev = timed(lambda: evaluate_captions(results, references, "bleu,meteor,rouge,cider"), 1)

    def toolkit():
        import contextlib
        import io

        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        with contextlib.redirect_stderr(io.StringIO()):
            out = toolkit_eval(results, references)
            tok = PTBTokenizer()
            gts = tok.tokenize({k: [{"caption": c} for c in v] for k, v in references.items()})
            res = tok.tokenize({k: [{"caption": results[k]}] for k in references})
        out["METEOR"] = Meteor().compute_score(gts, res)[0]
        return out

    t_ref, _, ref = timed(toolkit, 1)
    diff = max(abs(ev.corpus[k] - v) for k, v in ref.items())
    return [("C. BLEU+METEOR+ROUGE-L+CIDEr-D, 5,000 images x 5 refs (one run)", f"{t_ref:.2f} s (2)",
             f"{t_ours:.2f} s", f"{t_ref / t_ours:.1f}x", f"{diff:.1e}")]


def bench_reward(train, val, repeats):
    train_refs = [[ptb_tokenize(c) for c in caps[:5]] for caps in list(train.values())[:5000]]
    start = time.perf_counter()
    df = DocumentFrequency.from_references(train_refs)
    build = time.perf_counter() - start
    batch = [caps for caps in val.values() if len(caps) >= 5][1000:1050]
    refs = [[ptb_tokenize(c) for c in caps[:5]] for caps in batch]
    cands = [refs[i][j % 5] for i in range(50) for j in range(6)]
    cand_image = np.repeat(np.arange(50), 6)
    scorer = CiderD(df)
    vocab = {w: i for i, w in enumerate(df.words, start=1)}
    df_ids = DocumentFrequency.from_references([[[vocab[w] for w in s] for s in r] for r in train_refs])
    to_ids = lambda s: [vocab.get(w, 0) for w in s]  # noqa: E731
    id_refs = [[to_ids(s) for s in r] for r in refs]
    id_cands = [to_ids(c) for c in cands]
    scorer_ids = CiderD(df_ids)
    t_words, best_words, _ = timed(lambda: scorer(cands, refs, cand_image), repeats * 40)
    t_ids, best_ids, _ = timed(lambda: scorer_ids(id_cands, id_refs, cand_image), repeats * 40)
    return [("B. SCST reward, 50 images x 6 candidates x 5 refs, words", "0.16-0.36 s (1)", f"{t_words:.4f} s", "", ""),
            ("B. SCST reward, same batch as token ids", "", f"{t_ids:.4f} s", "", "")], build


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--with-meteor", action="store_true", help="also time the full set with METEOR (slow)")
    args = parser.parse_args()
    val, train = captions_by_image("val"), captions_by_image("train")
    rows, corpus = bench_evaluation(val, args.repeats)
    reward_rows, build = bench_reward(train, val, args.repeats)
    if args.with_meteor:
        rows += bench_full(val)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, numpy {np.__version__}")
    print("| measurement | pycocoevalcap / reference | catcap (median) | speed-up | max abs diff |")
    print("|---|---|---|---|---|")
    for row in rows + reward_rows:
        print("| " + " | ".join(row) + " |")
    print("\ncatcap corpus scores (A): " + ", ".join(f"{k} {v:.4f}" for k, v in corpus.items()))
    print(f"document frequencies of 5,000 train images built in {build:.2f} s")
    print("(1) self-critical.pytorch's CiderD scorer on this machine, as quoted in issue 2 (not rerun here)")
    if args.with_meteor:
        print("(2) the toolkit tokenises twice here (once for BLEU/ROUGE/CIDEr, once for METEOR): ~0.5 s of it")


if __name__ == "__main__":
    main()
