"""``catcap report`` and ``catcap human-eval create | serve | export``."""

from __future__ import annotations

import argparse
import sys

from catcap.cli import paths

REPORT_HELP = """\
Write one self-contained HTML page that compares two systems image by image: the
paired-bootstrap summary of `catcap compare` on top (B - A per metric, its 95%
interval, p), then one row per image with the image, both captions side by side,
the references, and each system's per-image scores with their difference.
Buttons sort the images by the largest difference of a metric (B better first,
A better first, largest |difference|); a box filters by words or image id.

A.json and B.json are COCO result files ([{"image_id": 42, "caption": "..."}]) or
what `catcap caption --out F.jsonl` (or --json) writes, for the same images; REFS is
COCO annotations or a Karpathy split file (+ --split).
With --images DIR the images are embedded as small JPEG thumbnails (the page
works offline and can be mailed), or linked with --link-images (a smaller page
that needs the image folder next to it). No model and no PyTorch are loaded.

examples:
  catcap report base_results.json cat_results.json --refs dataset_flickr8k.json --split test \\
      --images data/flickr8k/Flicker8k_Dataset --names base,cat --out report.html
  catcap report a.json b.json --refs captions_val2014.json --metrics bleu,cider --out report.html
"""

HUMAN_EVAL_HELP = """\
The paper's pairwise human study (Table 8): raters see an image with two captions,
one per system, in a random left/right order with the system names hidden, and
pick the more relevant and the more coherent caption (or no preference, or skip).

  create  pick N images both systems captioned and, per rater, a random order of
          the images and of the sides; writes STUDY_DIR (study.json, images/,
          votes.sqlite)
  serve   the rating pages; send each rater the link http://HOST:PORT/rate/<id>
  export  per-image winners, totals, Fleiss' kappa and a sign test per criterion

examples:
  catcap human-eval create --a base.json --b cat.json --refs dataset_flickr8k.json --split test \\
      --images data/flickr8k/Flicker8k_Dataset --n 100 --raters 5 --seed 0 --out study
  catcap human-eval serve study --host 0.0.0.0 --port 8001
  catcap human-eval export study --out study_results
"""

CREATE_HELP = """\
Make a study folder: N images sampled (with --seed) from those both systems
captioned (COCO result files, or `catcap caption`'s JSON Lines); for each rater a random order of the images, and for each rater and
image which caption is shown on the left (balanced: about half A-left per rater
and per image). The images are copied into the study (JPEG, at most 640 px).
Rater ids are r1..rN (--raters N) or the names given with --rater-ids.
An existing --out folder is never overwritten.

example:
  catcap human-eval create --a base.json --b cat.json --refs dataset_flickr8k.json --split test \\
      --images data/flickr8k/Flicker8k_Dataset --n 100 --raters 5 --seed 0 --names base,cat --out study
"""

SERVE_HELP = """\
Serve the rating pages of a study. A rater opens http://HOST:PORT/ and types their
id, or opens http://HOST:PORT/rate/<id> directly; they see each image once,
resume at their first unrated image when they come back, and may change an
answer (the new one replaces the old). Votes go to STUDY_DIR/votes.sqlite at
once (SQLite, WAL mode), so stopping the server loses nothing. --host 0.0.0.0
lets raters on your network connect (the default serves this machine only).
Needs the web extra: pip install 'catcap[web]'.

example:
  catcap human-eval serve study --port 8001
"""

EXPORT_HELP = """\
Summarise a study's votes (also while it is still being served). Per criterion:
the winner of each image (the system preferred by MORE than half of all raters,
e.g. at least 3 of 5; skipped and missing ratings prefer neither; otherwise a
tie), the totals (A wins / B wins / ties), Fleiss' kappa over A / B / no
preference, and a two-sided exact sign test of A's wins against B's (ties
dropped). Writes winners.csv, votes.csv, summary.json and summary.html to --out.

example:
  catcap human-eval export study --out study_results
"""


def _raw(sub, name: str, help_: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help_, description=description,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def register(sub) -> None:
    rep = _raw(sub, "report", "side-by-side HTML report of two result files", REPORT_HELP)
    rep.add_argument("a", metavar="A.json", help="results of system A (the baseline)")
    rep.add_argument("b", metavar="B.json", help="results of system B")
    rep.add_argument("--refs", metavar="REFS.json", required=True, help="COCO annotations or a Karpathy split file")
    rep.add_argument("--split", help="split to use when REFS is a Karpathy file (train/val/test/restval)")
    rep.add_argument("--images", metavar="DIR", help="the image folder (files named by REFS, or <image_id>.jpg/.png)")
    rep.add_argument("--link-images", action="store_true", help="link the images instead of embedding thumbnails")
    rep.add_argument("--thumb", type=int, default=192, help="embedded thumbnail size, longest side in px (default 192)")
    rep.add_argument("--names", metavar="A,B", help="display names of the two systems (default A,B)")
    rep.add_argument("--metrics", default="bleu,rouge,cider",
                     help="comma-separated subset of bleu,meteor,rouge,cider,cider-plain,spice "
                     "(default bleu,rouge,cider)")
    rep.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    rep.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    rep.add_argument("--corenlp", metavar="DIR", help="CoreNLP 3.6.0 jars for SPICE (see catcap evaluate --help)")
    rep.add_argument("--out", metavar="REPORT.html", required=True, help="the HTML file to write")
    paths.declare(rep, a=paths.INPUT, b=paths.INPUT, refs=paths.INPUT, images=paths.PHOTOS, corenlp=paths.INPUT,
                  out=paths.OUTPUT)
    rep.set_defaults(func=cmd_report)

    he = _raw(sub, "human-eval", "pairwise human evaluation of two systems (create, serve, export)", HUMAN_EVAL_HELP)
    he_sub = he.add_subparsers(dest="action", metavar="ACTION", required=True)
    cr = _raw(he_sub, "create", "make a study folder from two result files", CREATE_HELP)
    cr.add_argument("--a", metavar="A.json", required=True, help="results of system A")
    cr.add_argument("--b", metavar="B.json", required=True, help="results of system B")
    cr.add_argument("--refs", metavar="REFS.json", required=True, help="COCO annotations or a Karpathy split file")
    cr.add_argument("--split", help="split to use when REFS is a Karpathy file")
    cr.add_argument("--images", metavar="DIR", required=True, help="the image folder")
    cr.add_argument("--n", type=int, default=100, help="images to rate (default 100)")
    cr.add_argument("--raters", type=int, help="number of raters, ids r1..rN (default 5)")
    cr.add_argument("--rater-ids", metavar="ID,ID,...", help="the raters' ids instead of r1..rN")
    cr.add_argument("--seed", type=int, default=0, help="random seed of the sampling and the orders (default 0)")
    cr.add_argument("--names", metavar="A,B", help="names of the systems in the exported results (default A,B)")
    cr.add_argument("--out", metavar="STUDY_DIR", required=True, help="the study folder to create (must not exist)")
    paths.declare(cr, a=paths.INPUT, b=paths.INPUT, refs=paths.INPUT, images=paths.PHOTOS, out=paths.OUTPUT)
    cr.set_defaults(func=cmd_create)
    sv = _raw(he_sub, "serve", "serve the rating pages of a study", SERVE_HELP)
    sv.add_argument("study", metavar="STUDY_DIR")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8001, help="port (default 8001)")
    paths.declare(sv, study=paths.INPUT)
    sv.set_defaults(func=cmd_serve)
    ex = _raw(he_sub, "export", "winners, totals, agreement and sign test of a study", EXPORT_HELP)
    ex.add_argument("study", metavar="STUDY_DIR")
    ex.add_argument("--out", metavar="DIR", required=True, help="folder for the CSV, JSON and HTML files")
    paths.declare(ex, study=paths.INPUT, out=paths.Role("output", names=_exported))
    ex.set_defaults(func=cmd_export)


def _exported(args) -> tuple[str, ...]:
    from catcap.web.human_eval.export import EXPORTED

    return EXPORTED


def _log(msg: str) -> None:
    print(f"[catcap] {msg}", file=sys.stderr)


def cmd_report(args) -> int:
    from catcap.web.report import write_report

    data = write_report(args.out, args.a, args.b, args.refs, split=args.split, images=args.images,
                        names=args.names, metrics=args.metrics, link_images=args.link_images,
                        resamples=args.resamples, seed=args.seed, thumb=args.thumb, corenlp_dir=args.corenlp, log=_log)
    print(f"report of {len(data.image_ids)} images written to {args.out}")
    return 0


def cmd_create(args) -> int:
    from catcap.web.human_eval.study import create_study

    raters = args.raters if args.raters is not None or args.rater_ids else 5
    study = create_study(args.out, args.a, args.b, args.refs, args.images, split=args.split, n=args.n, raters=raters,
                         rater_ids=args.rater_ids, seed=args.seed, names=args.names)
    print(f"study written to {args.out}: {len(study.items)} images, raters {', '.join(study.raters)}")
    print(f"serve it with: catcap human-eval serve {args.out}")
    return 0


def cmd_serve(args) -> int:
    try:
        import uvicorn

        from catcap.web.human_eval.app import create_app
    except ImportError as err:
        raise ValueError(f"catcap human-eval serve needs the web extra ({err.name} is not installed): "
                         "pip install 'catcap[web]'") from None
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be 0..65535, got {args.port}")
    app = create_app(args.study)
    host = "localhost" if args.host in ("127.0.0.1", "0.0.0.0") else args.host
    _log(f"serving {args.study} on http://{args.host}:{args.port}/ (Ctrl-C stops; votes are saved as they come)")
    for rid in app.state.raters:
        _log(f"  rater {rid}: http://{host}:{args.port}/rate/{rid}")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_export(args) -> int:
    from catcap.web.human_eval.export import export_study

    summary = export_study(args.study, args.out)
    names = summary["systems"]
    print(f"{summary['images']} images, {summary['raters']} raters; a win needs {summary['majority']} votes")
    print(f"{'criterion':<11} {names['A'][:10]:>10} {names['B'][:10]:>10} {'ties':>5} {'kappa':>7} {'sign p':>8}")
    for crit, c in summary["criteria"].items():
        kappa = "  n/a" if c["fleiss_kappa"] is None else f"{c['fleiss_kappa']:7.3f}"
        print(f"{crit:<11} {c['wins_A']:>10} {c['wins_B']:>10} {c['ties']:>5} {kappa:>7} {c['sign_test_p']:>8.4f}")
    print(f"written to {args.out}: winners.csv, votes.csv, summary.json, summary.html")
    return 0
