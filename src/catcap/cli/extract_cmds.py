"""``catcap extract``: images -> grid features in an HDF5 feature store."""

from __future__ import annotations

import argparse
import sys

from catcap.threads import default_workers

EXTRACT_HELP = """\
Turn a folder of images into the features a captioner reads: every image goes through a
pretrained EfficientNet-Lite (ImageNet weights) and its last convolutional stage is stored as a
grid of region features, e.g. 7x7 = 49 regions of 1280 numbers for efficientnet-lite0, with each
cell's pixel box in the original image (to draw attention on the photo later).

  encoder             input  grid  regions x width
  efficientnet-lite0  224    7x7   49 x 1280   (fastest)
  efficientnet-lite1  240    8x8   64 x 1280
  efficientnet-lite2  260    9x9   81 x 1280   (most accurate)

Each image is center-cropped (a square of S/(S+32) of its shorter side, 7/8 for lite0), resized (bicubic)
and normalised (x - 127) / 128, as the weights were trained; the store records this, with the
encoder's name, so a checkpoint can later caption raw photos the same way.

Keys: with --dataset JSON (from catcap import) only that dataset's images are extracted and each
is keyed by its image id (1000268201), which is what catcap train looks up: use it for a
training recipe. Without --dataset an image is keyed by its file name without extension
(1000268201_693b08cb0e.jpg -> 1000268201_693b08cb0e), which catcap train cannot match to a
dataset. The store records which, and continuing it the other way is refused (one file never
holds an image twice under two keys).

--backend onnx runs the same network through ONNX Runtime, several times faster on a CPU (the
model is exported once into the onnx folder of catcap's cache ($CATCAP_CACHE_DIR, else
$XDG_CACHE_HOME/catcap, else ~/.cache/catcap) and checked against
PyTorch before the run; needs pip install "catcap[onnx]"). Both give the same features (~3e-5).

An interrupted run is continued by running the same command again (images already in --out are
skipped). Unreadable images are skipped and listed in OUT.errors.txt; the run never stops on them
(but if not one image can be read, nothing is written and the command fails).

Many processes, many machines: --shard I/N extracts block I of N (counting from 0) of the
selected images into a part next to --out (feats.h5 -> feats.part-000-of-004.h5, itself resumable);
once every shard is done, catcap merge feats.h5 joins the parts into the store one process would
have written (the same file, byte for byte) and removes them. Under torchrun each rank takes its
shard by itself and rank 0 merges automatically when all are done (docs/distributed.md; set
OMP_NUM_THREADS to the cores per process).

examples:
  # the Flickr8k recipe's features (keyed by image id, as catcap train expects)
  catcap extract --images ../shared/data/flickr8k/images \\
                 --dataset data/flickr8k/dataset_flickr8k.json --out data/flickr8k/lite0.h5
  # the same through ONNX Runtime, several times faster on a CPU
  catcap extract --backend onnx --workers 1 --images ../shared/data/flickr8k/images \\
                 --dataset data/flickr8k/dataset_flickr8k.json --out data/flickr8k/lite0.h5
  # a folder of your own photos, keyed by file name (a quick look at the first 100)
  catcap extract --encoder efficientnet-lite2 --images photos/ --out photos_lite2.h5 --limit 100
  # a large folder in 4 pieces (run each anywhere the folder is), then join them
  catcap extract --images photos/ --out photos.h5 --shard 0/4
  catcap merge photos.h5
"""


def register(sub) -> None:
    ext = sub.add_parser("extract", help="extract image features (EfficientNet-Lite grid) into an .h5 store",
                         description=EXTRACT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ext.add_argument("--images", required=True, metavar="DIR", help="folder of images (.jpg, .png, ...; not recursive)")
    ext.add_argument("--out", required=True, metavar="FILE.h5", help="the HDF5 feature store to write or continue")
    ext.add_argument("--dataset", metavar="JSON",
                     help="a Karpathy-format dataset (catcap import): extract its images, keyed by image id")
    ext.add_argument("--encoder", default="efficientnet-lite0",
                     help="efficientnet-lite0 (default), efficientnet-lite1 or efficientnet-lite2")
    ext.add_argument("--backend", default="torch", choices=["torch", "onnx"],
                     help="torch (default: eager PyTorch) or onnx (ONNX Runtime: several times faster on a CPU)")
    ext.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default 32)")
    ext.add_argument("--workers", type=int, default=default_workers(2),
                     help="processes decoding and resizing images while the network runs (default 2, or 1 when the "
                          "process may use only 1 CPU; 0 = decode in the main process). On a 2-core machine the "
                          "count changes the speed little; with more cores, workers keep the network busy")
    ext.add_argument("--limit", type=_positive_int, metavar="N",
                     help="only the first N images (N >= 1; a quick look): by file name, or with --dataset in "
                          "the dataset file's order")
    ext.add_argument("--restart", action="store_true",
                     help="replace --out instead of continuing it (default: continue, skipping done images)")
    ext.add_argument("--shard", metavar="I/N",
                     help="extract only block I of N (0 <= I < N) into OUT's part OUT.part-III-of-NNN.h5; join the "
                          "parts with catcap merge OUT (under torchrun: automatic, each rank its block)")
    ext.add_argument("--keep-parts", action="store_true",
                     help="under torchrun: keep the parts after rank 0 merged them (default: removed)")
    ext.add_argument("--quiet", action="store_true", help="no progress bar")
    ext.set_defaults(func=cmd_extract)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of images >= 1, found {text!r}; "
                                         "leave --limit out to extract every image")
    return value


def cmd_extract(args) -> int:
    from catcap import api

    try:
        res = api.extract(args.images, args.out, encoder=args.encoder, backend=args.backend, dataset=args.dataset, batch_size=args.batch_size,
                          workers=args.workers, limit=args.limit, restart=args.restart, progress=not args.quiet,
                          shard=args.shard, keep_parts=args.keep_parts, log=lambda m: print(m, file=sys.stderr))
    except (FileNotFoundError, FileExistsError, ValueError) as err:  # bad input: a message, not a traceback
        print(f"catcap extract: error: {err}", file=sys.stderr)
        return 2
    print(f"{res.out}: {res.extracted} images extracted ({res.images_per_second:.1f} images/s), "
          f"{res.skipped} already there, {len(res.errors)} unreadable")
    if res.merged is not None:
        print(f"{res.merged.out}: merged from {len(res.merged.parts)} parts ({res.merged.items} images added)")
    return 0
