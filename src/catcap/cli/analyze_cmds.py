"""``catcap analyze``: look inside trained models (``catcap analyze history``)."""

from __future__ import annotations

import argparse
import importlib
import sys

from catcap.cli import paths

ANALYZE_HELP = """\
Look inside trained captioners.

subcommands:
  history   how CAT / LightCAT / M2 + (Light)CACA use their historical context memory (paper Fig. 5)
"""

HISTORY_HELP = """\
How much does a CAT / LightCAT (or M2 + CACA / LightCACA) decoder look back at its own history?

CACA (model.cross_attention=caca) and LightCACA (light_caca) let the decoder attend, at
word t, to the image regions AND to a memory of its earlier attention contexts (history
entries 1..t), in one softmax. The weight that softmax puts on the history, summed over the
entries, is the history weight a_t (0 = only the image, 1 = only the history). The
adaptive weight constraint (train.awc.enabled=true) pulls a_t towards a learned target per
layer and head. This command greedy-decodes --limit images of --split with each checkpoint
and shows, for one decoder layer (--layer, default the top one), averaged over heads (in an
M2 model over its encoder levels x heads: every level's attention has its own history weight):

  history_weight.png   one line per checkpoint: mean a_t at word position t = 1, 2, ...
                       over the images still generating at t (the lower panel counts them:
                       the tail of a curve rests on few, long captions). A dotted line is a
                       checkpoint's learned AWC target beta (mean over heads). The paper
                       reports, with AWC, about 0.07 at the first word settling near 0.2.
  history_weight.json  the numbers: per position (and per head), counts, betas, captions.
  attention_<id>.png   one image (--image-id, default the split's first), one panel per
                       generated word: the picture with each region box lit and outlined by
                       the attention it gets (the number on a box is its weight), and below
                       it a bar per history entry, labelled with the word that step read
                       (<bos> for the first; orange = the current step's own entry). The
                       panel title gives the word and its history weight. With several
                       checkpoints: attention_<id>_<label>.png, one per checkpoint. The
                       photo is looked for in --images DIR, next to the dataset file, and in
                       the images folder `catcap import` recorded in it; without it the
                       regions are drawn as bars (a note says so).

Position t is the step that produces the t-th output token; the step that produces <eos>
is included (the AWC loss constrains it too) unless --words-only.

examples:
  catcap analyze history --checkpoint runs/cat/best --out runs/cat/analysis
  catcap analyze history --checkpoint runs/cat_awc/best --label "CAT + AWC" \\
                         --checkpoint runs/cat/best --label "CAT, no AWC" \\
                         --split val --limit 250 --out runs/history
"""


def register(sub) -> None:
    ana = sub.add_parser("analyze", help="look inside trained models (history attention of CAT)",
                         description=ANALYZE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ana.set_defaults(func=lambda args: (ana.print_help(), 0)[1])
    kinds = ana.add_subparsers(dest="analysis", metavar="ANALYSIS")
    his = kinds.add_parser("history", help="history weight per word position, and one image's attention",
                           description=HISTORY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    his.add_argument("--checkpoint", action="append", required=True, metavar="DIR",
                     help="a caca / light_caca checkpoint written by catcap train; repeat to compare several")
    his.add_argument("--label", action="append", metavar="NAME",
                     help="legend name of each --checkpoint, in order (default: from the config, "
                          "e.g. 'CAT + AWC')")
    his.add_argument("--out", required=True, metavar="DIR", help="folder for the PNG and JSON files")
    his.add_argument("--split", default="val", help="split of the checkpoint's dataset to decode (default val)")
    his.add_argument("--limit", type=int, default=250, help="decode the split's first N images (default 250; "
                     "0 = all)")
    his.add_argument("--layer", type=int, default=-1, help="decoder layer to show: -1 = top (default), "
                     "0 = bottom, 1 = second, ...")
    his.add_argument("--image-id", metavar="ID", help="image of the attention picture (default: the split's first)")
    his.add_argument("--max-len", type=int, default=20, help="at most this many words per caption (default 20)")
    his.add_argument("--batch-size", type=int, default=50, help="images decoded at once (default 50)")
    his.add_argument("--words-only", action="store_true", help="leave the <eos> step out of the averages")
    his.add_argument("--dataset", metavar="FILE.json", help="Karpathy file (default: the checkpoint's data.dataset)")
    his.add_argument("--features", metavar="STORE", help="feature store (default: the checkpoint's data.features)")
    his.add_argument("--images", metavar="DIR", help="folder of the dataset's photos, to draw the attention on the "
                     "image (default: next to the dataset file, or the folder `catcap import` recorded)")
    his.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="where to run (default auto)")
    his.add_argument("--quiet", action="store_true", help="no progress bar")
    paths.declare(his, checkpoint=paths.CHECKPOINT, dataset=paths.INPUT, features=paths.INPUT, images=paths.PHOTOS,
                  out=paths.writes("history_weight.png", "history_weight.json", "attention_*.png"))
    his.set_defaults(func=cmd_history)


def cmd_history(args) -> int:
    try:
        from catcap import api
        from catcap.viz.history import summary_positions

        importlib.import_module("catcap.viz.history_plots")  # fail early without matplotlib
    except ImportError as err:
        print(f"catcap analyze history: error: {err}", file=sys.stderr)
        return 2
    if args.limit < 0:
        raise ValueError(f"--limit must be >= 0 (0 = the whole split), got {args.limit}")
    report = api.analyze_history(args.checkpoint, args.out, labels=args.label, split=args.split,
                             limit=args.limit or None, layer=args.layer, image_id=args.image_id,
                             max_len=args.max_len, batch_size=args.batch_size, include_eos=not args.words_only,
                             dataset=args.dataset, features=args.features, device=args.device,
                             progress=not args.quiet, images=args.images)
    for c in report.curves:
        numbers = ", ".join(f"t={k} {v:.3f}" for k, v in summary_positions(c).items())
        print(f"{c.label}: mean history weight {c.overall:.3f} over {c.images} images "
              f"(layer {c.layer + 1}/{c.num_layers}); {numbers}")
    print(f"wrote {report.history_png}")
    print(f"wrote {report.history_json}")
    for p in report.attention_pngs:
        print(f"wrote {p}")
    if report.photo is None:
        looked = ", ".join(str(f) for f in report.photo_folders)
        print(f"note: the photo of image {report.image_id} was not found (looked in {looked}), so the attention "
              "picture shows the regions as bars; pass --images DIR to draw it on the photo", file=sys.stderr)
    return 0
