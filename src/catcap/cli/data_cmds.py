"""``catcap import flickr8k``, ``catcap import coco`` and ``catcap prepare``: real datasets."""

from __future__ import annotations

import argparse
import sys

from catcap.cli import paths

F8K = "../shared/data/flickr8k"

IMPORT_HELP = f"""\
Turn an official caption release into a Karpathy-format dataset JSON (the format
dataset_coco.json / dataset_flickr8k.json use, which catcap train, evaluate and extract read).
Captions are tokenised with catcap's PTB tokenizer, the one the metrics use.

  catcap import flickr8k ...   Flickr8k.token.txt + Flickr_8k.*Images.txt split lists
  catcap import coco ...       captions_train2014.json / captions_val2014.json + split lists

Then run `catcap prepare --dataset THE.json --out DIR`. See docs/datasets.md and
`catcap import flickr8k --help` / `catcap import coco --help` for each source's files.

example:
  catcap import flickr8k --tokens {F8K}/Flickr8k.token.txt \\
      --train {F8K}/Flickr_8k.trainImages.txt --val {F8K}/Flickr_8k.devImages.txt \\
      --out data/flickr8k/dataset_flickr8k.json
"""

FLICKR_HELP = f"""\
Import Flickr8k (or Flickr30k, whose files have the same form).

files:
  --tokens   Flickr8k.token.txt: one caption per line, '<image>.jpg#<k><TAB><caption>' (k = 0..4)
  --train / --val / --test
             Flickr_8k.trainImages.txt, Flickr_8k.devImages.txt, Flickr_8k.testImages.txt:
             one image file name per line; devImages is the validation split
  --images   the folder of .jpg files (optional): listed images without a file are left out

Image ids are Flickr photo ids, the number before the '_' of the file name
(1000268201_693b08cb0e.jpg -> 1000268201), so ids do not depend on which splits you import.
Images with no caption, captioned images in no split list (unless --unsplit SPLIT) and
images missing from --images are left out and listed as warnings; malformed lines and an image
in two splits are errors.

example (the copy of Flickr8k next to this repository has no test split):
  catcap import flickr8k --tokens {F8K}/Flickr8k.token.txt \\
      --train {F8K}/Flickr_8k.trainImages.txt --val {F8K}/Flickr_8k.devImages.txt \\
      --images {F8K}/images --out data/flickr8k/dataset_flickr8k.json
"""

COCO_HELP = """\
Import COCO captions. --captions takes COCO's caption files (captions_train2014.json,
captions_val2014.json: "images" with id/file_name, "annotations" with image_id/caption).
--split-list SPLIT=FILE (repeatable) names a split's images one per line, by COCO id (391895)
or file name (COCO_val2014_000000391895.jpg). Images in no list go to --unlisted-split
(default train, like Karpathy's restval; 'none' leaves them out). Image ids are COCO ids.

example (Karpathy's split as lists of ids):
  catcap import coco --captions captions_train2014.json captions_val2014.json \\
      --split-list val=karpathy_val_ids.txt --split-list test=karpathy_test_ids.txt \\
      --out data/coco/dataset_coco.json
"""

PREPARE_HELP = f"""\
Prepare a Karpathy-format dataset for training. Writes into --out:
  vocab.json      words seen at least --min-count times in the train split (<pad>=0 <bos>=1 <eos>=2 <unk>=3)
  captions.npz    the train captions encoded with it, cut to --max-len words (ids, lengths,
                  image_keys, ...; plain arrays, no pickle)
  prepare.json    images/captions per split, vocabulary size, token coverage, % truncated,
                  caption length statistics
and the train split's CIDEr-D document frequencies next to the dataset JSON, named as
catcap train's self-critical phase looks for them (<stem>.<split>.<hash>.cider-df.npz).

example:
  catcap import flickr8k --tokens {F8K}/Flickr8k.token.txt \\
      --train {F8K}/Flickr_8k.trainImages.txt --val {F8K}/Flickr_8k.devImages.txt \\
      --out data/flickr8k/dataset_flickr8k.json
  catcap prepare --dataset data/flickr8k/dataset_flickr8k.json --out data/flickr8k/prepared
"""


FEATURES_HELP = """\
Convert region features from the formats other captioning code uses into catcap's HDF5 feature
store (keys = image ids; regions (N, F) float32; boxes when the source has them). The import is
atomic and resumable: rerunning it after an interruption skips the images already written;
--restart starts again instead and replaces --out once the new store is complete (needed when
--out holds features made another way, e.g. from another source format or feature width).
The source is checked before anything is written. Nothing is unpickled.

formats:
  tsv   bottom-up attention TSV (Anderson et al.): image_id, image_w, image_h, num_boxes,
        boxes, features per line, boxes/features base64 float32
  npy   a folder of <image_id>.npy (N, F) or .npz (array feat/features/x, optional boxes/bbox),
        e.g. self-critical.pytorch's cocobu_att (+ --boxes cocobu_box)
  m2    the M2 Transformer's HDF5 file: datasets <image_id>_features (+ <image_id>_boxes)
  lmdb  an LMDB whose values are .npy/.npz bytes (needs `pip install lmdb`)

example:
  catcap import features --format tsv --source trainval/*.tsv --out data/coco/features.h5
  catcap import features --format m2 --source coco_detections.hdf5 --out data/coco/features.h5
  catcap import features --format npy --source cocobu_att --boxes cocobu_box --out data/coco/features.h5 --restart
"""


def register(sub) -> None:
    imp = sub.add_parser("import", help="official caption files -> a Karpathy-format dataset JSON",
                         description=IMPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = imp.add_subparsers(dest="source", metavar="SOURCE")
    imp.set_defaults(func=lambda args: (imp.print_help(), 2)[1])

    f8k = kinds.add_parser("flickr8k", help="Flickr8k.token.txt + split lists", description=FLICKR_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    f8k.add_argument("--tokens", required=True, metavar="FILE", help="Flickr8k.token.txt")
    f8k.add_argument("--train", required=True, metavar="LIST", help="Flickr_8k.trainImages.txt")
    f8k.add_argument("--val", required=True, metavar="LIST", help="Flickr_8k.devImages.txt")
    f8k.add_argument("--test", metavar="LIST", help="Flickr_8k.testImages.txt (optional)")
    f8k.add_argument("--images", metavar="DIR", help="folder of the .jpg files; listed images missing there are left out")
    f8k.add_argument("--unsplit", metavar="SPLIT", help="put captioned images that no list names in this split "
                     "(default: leave them out)")
    f8k.add_argument("--out", required=True, metavar="FILE.json", help="the dataset JSON to write")
    paths.declare(f8k, tokens=paths.INPUT, train=paths.INPUT, val=paths.INPUT, test=paths.INPUT,
                  images=paths.PHOTOS, out=paths.OUTPUT)
    f8k.set_defaults(func=cmd_import_flickr8k)

    coco = kinds.add_parser("coco", help="COCO captions_*.json + split lists", description=COCO_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    coco.add_argument("--captions", required=True, nargs="+", metavar="FILE.json",
                      help="captions_train2014.json, captions_val2014.json, ...")
    coco.add_argument("--split-list", action="append", default=[], metavar="SPLIT=FILE",
                      help="a split's images, one COCO id or file name per line (repeatable)")
    coco.add_argument("--unlisted-split", default="train", metavar="SPLIT",
                      help="split of images in no list (default train; 'none' leaves them out)")
    coco.add_argument("--out", required=True, metavar="FILE.json", help="the dataset JSON to write")
    paths.declare(coco, captions=paths.INPUT, out=paths.OUTPUT,
                  split_list=paths.Role("input", path=lambda item: item.partition("=")[2]))
    coco.set_defaults(func=cmd_import_coco)

    feats = kinds.add_parser("features", help="region features you already have -> a catcap feature store",
                             description=FEATURES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    feats.add_argument("--format", required=True, choices=("tsv", "npy", "m2", "lmdb"), help="the source's layout")
    feats.add_argument("--source", required=True, nargs="+", metavar="PATH",
                       help="TSV file(s), a folder of .npy/.npz, an M2 .hdf5 file or an LMDB")
    feats.add_argument("--boxes", metavar="DIR", help="npy format: a folder of <key>.npy boxes (N, 4)")
    feats.add_argument("--out", required=True, metavar="FEATS.h5", help="the catcap HDF5 feature store to write")
    feats.add_argument("--restart", action="store_true",
                       help="start again instead of resuming: replace --out (and a left-over FEATS.h5.partial) "
                            "once the new store is complete")
    # a folder source is read for its arrays (npy) or its LMDB files; --boxes for its arrays
    paths.declare(feats, source=paths.reads("*.npy", "*.npz", "*.mdb"), boxes=paths.reads("*.npy", "*.npz"),
                  out=paths.OUTPUT)
    feats.set_defaults(func=cmd_import_features)

    prep = sub.add_parser("prepare", help="vocabulary, encoded captions and CIDEr-D df of a dataset JSON",
                          description=PREPARE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    prep.add_argument("--dataset", required=True, metavar="FILE.json", help="a Karpathy-format dataset JSON")
    prep.add_argument("--out", required=True, metavar="DIR", help="folder for vocab.json, captions.npz, prepare.json")
    prep.add_argument("--min-count", type=int, default=5, help="keep words seen at least this often in train (default 5)")
    prep.add_argument("--max-len", type=int, default=16, help="cut training captions to this many words (default 16)")
    prep.add_argument("--train-split", default="train", help="the split the vocabulary is counted on (default train)")
    paths.declare(prep, dataset=paths.INPUT, out=paths.writes("vocab.json", "captions.npz", "prepare.json"))
    prep.set_defaults(func=cmd_prepare)


def _print_report(report: dict, out: str) -> None:
    splits = ", ".join(f"{s} {n}" for s, n in report["splits"].items())
    print(f"wrote {out}: {sum(report['splits'].values())} images ({splits}), {report['captions']} captions")
    print(f"image ids: {report['image_id_rule']}")
    for w in report["warnings"]:
        print(f"warning: {w}", file=sys.stderr)


def cmd_import_flickr8k(args) -> int:
    from catcap import api

    lists = {"train": args.train, "val": args.val}
    if args.test:
        lists["test"] = args.test
    report = api.import_flickr8k(args.tokens, lists, args.out, images=args.images, unsplit=args.unsplit)
    _print_report(report, args.out)
    return 0


def cmd_import_coco(args) -> int:
    from catcap import api

    lists = {}
    for item in args.split_list:
        split, sep, path = item.partition("=")
        if not sep or not split or not path:
            raise ValueError(f"--split-list expects SPLIT=FILE (e.g. val=karpathy_val_ids.txt), found {item!r}")
        if split in lists:
            raise ValueError(f"--split-list names split {split!r} twice ({lists[split]} and {path}); give one file per split")
        lists[split] = path
    unlisted = None if args.unlisted_split.lower() == "none" else args.unlisted_split
    report = api.import_coco(args.captions, args.out, split_lists=lists or None, unlisted_split=unlisted)
    _print_report(report, args.out)
    return 0


def cmd_import_features(args) -> int:
    from catcap.api import import_features

    # several sources are for tsv only; for the other formats import_features refuses them
    source = args.source if args.format == "tsv" or len(args.source) > 1 else args.source[0]
    report = import_features(args.format, source, args.out, boxes_dir=args.boxes, overwrite=args.restart)
    print(f"wrote {report['written']} images ({report['feature_dim']}-d features) to {report['out']}"
          + (f"; {report['skipped']} already there" if report["skipped"] else ""))
    return 0


def cmd_prepare(args) -> int:
    from catcap import api

    s = api.prepare(args.dataset, args.out, min_count=args.min_count, max_len=args.max_len,
                    train_split=args.train_split)
    splits = ", ".join(f"{k} {v['images']} images / {v['captions']} captions" for k, v in s["splits"].items())
    print(f"{args.dataset}: {splits}")
    print(f"vocabulary: {s['vocab_size']} tokens ({s['vocab_words']} words seen >= {s['min_count']} times of "
          f"{s['train_distinct_words']} distinct), covering {100 * s['train_token_coverage']:.2f}% of train tokens")
    ln = s["train_caption_length"]
    print(f"train captions: mean {ln['mean']} words, median {ln['median']}, max {ln['max']}; "
          f"{s['train_captions_truncated_pct']:.2f}% longer than {s['max_len']} words are cut")
    print(f"wrote {s['files']['vocab']}, {s['files']['captions']}, {args.out}/prepare.json")
    print(f"CIDEr-D df: {s['files']['cider_df']} ({s['files']['cider_df_note']})")
    return 0
