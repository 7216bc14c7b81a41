"""``catcap vqa train | evaluate | ask``: VLP's visual question answering."""

from __future__ import annotations

import argparse

from catcap import api
from catcap.cli import paths

VQA_HELP = """\
Visual question answering with a VLP model (docs/vlp.md): fine-tune a VLP checkpoint written by
catcap train (captioning or masked-token pre-training, model.decoder=vlp) on the questions of a
split file's "qa" entries (the built-in world has ~12 per image), score a fine-tuned model
(VQA accuracy overall and per question type, beside the most frequent training answer of each
type), or ask it about one image of the feature store.

examples:
  catcap train --config configs/models/vlp_small.yaml data.dataset=runs/demo/world/dataset_shapes.json \\
      data.features=runs/demo/world/features.h5 train.mlm.enabled=true train.schedule.factor=0.25 \\
      out_dir=runs/vlp_pre
  catcap vqa train --checkpoint runs/vlp_pre/best --out runs/vqa --epochs 10
  catcap vqa evaluate --model runs/vqa/best --split test --output runs/vqa/test.json
  catcap vqa ask --model runs/vqa/best --image 3251 "what color is the star?"
  catcap vqa ask --model runs/vqa_photos/best --image my_photo.jpg "is there a dog?"
"""


def register(sub) -> None:
    vqa = sub.add_parser("vqa", help="visual question answering with a VLP model (train, evaluate, ask)",
                         description=VQA_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    vqa.set_defaults(func=lambda args: (vqa.print_help(), 0)[1])
    kinds = vqa.add_subparsers(dest="action", metavar="ACTION")
    tr = kinds.add_parser("train", help="fine-tune a VLP checkpoint for VQA", description=VQA_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_argument("--checkpoint", required=True, metavar="DIR", help="a VLP checkpoint written by catcap train")
    tr.add_argument("--out", default="runs/vqa", metavar="DIR", help="run folder: best/ and last/ (default runs/vqa)")
    tr.add_argument("--dataset", default="", metavar="FILE.json", help="split file with qa (default: the checkpoint's)")
    tr.add_argument("--features", default="", metavar="STORE", help="feature store (default: the checkpoint's)")
    tr.add_argument("--epochs", type=int, default=10)
    tr.add_argument("--batch-size", type=int, default=64, help="questions per step (default 64)")
    tr.add_argument("--lr", type=float, default=1e-4, help="Adam's learning rate (default 1e-4)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--min-answer-count", type=int, default=1, help="answers seen fewer times are not in the "
                    "answer vocabulary (default 1)")
    tr.add_argument("--fresh", action="store_true", help="keep the checkpoint's architecture and vocabulary but "
                    "start from new weights: the control run of 'does pre-training help'")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    paths.declare(tr, checkpoint=paths.CHECKPOINT, dataset=paths.INPUT, features=paths.INPUT,
                  out=paths.writes("best", "last", "log.jsonl"))
    tr.set_defaults(func=_train)
    ev = kinds.add_parser("evaluate", help="VQA accuracy overall and per question type")
    ev.add_argument("--model", required=True, metavar="DIR", help="a checkpoint written by catcap vqa train")
    ev.add_argument("--split", default="test", help="split to score (default test)")
    ev.add_argument("--dataset", metavar="FILE.json", help="split file (default: the fine-tuning run's)")
    ev.add_argument("--features", metavar="STORE", help="feature store (default: the fine-tuning run's)")
    ev.add_argument("--output", metavar="FILE.json", help="also write the scores here (atomically)")
    paths.declare(ev, model=paths.CHECKPOINT, dataset=paths.INPUT, features=paths.INPUT, output=paths.OUTPUT)
    ev.set_defaults(func=_evaluate)
    ak = kinds.add_parser("ask", help="answer a question about a photo or an image of the feature store")
    ak.add_argument("--model", required=True, metavar="DIR", help="a checkpoint written by catcap vqa train")
    ak.add_argument("--image", required=True, metavar="PHOTO|KEY", help="a photo file (read by the image encoder "
                    "that made the model's features, for models trained on `catcap extract` features) or the "
                    "image's key in the feature store")
    ak.add_argument("--features", metavar="STORE", help="feature store (default: the fine-tuning run's)")
    ak.add_argument("--top", type=int, default=3, help="how many answers to print (default 3)")
    ak.add_argument("question")
    paths.declare(ak, model=paths.CHECKPOINT, image=paths.INPUT, features=paths.INPUT)
    ak.set_defaults(func=_ask)


def _train(args) -> int:
    from catcap.training.vqa import VQAConfig

    cfg = VQAConfig(checkpoint=args.checkpoint, out_dir=args.out, dataset=args.dataset, features=args.features,
                    epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                    min_answer_count=args.min_answer_count, progress=not args.no_progress, fresh=args.fresh)
    print(f"best checkpoint: {api.vqa_train(cfg)}")
    return 0


def _evaluate(args) -> int:
    result = api.vqa_evaluate(args.model, args.split, dataset=args.dataset, features=args.features)
    print(f"{'question type':<16}{'model':>8}{'baseline':>10}")
    for t, acc in result["per_type"].items():
        print(f"{t:<16}{acc:>8.3f}{result['baseline']['per_type'][t]:>10.3f}")
    print(f"{'all':<16}{result['accuracy']:>8.3f}{result['baseline']['accuracy']:>10.3f}   "
          f"({result['questions']} questions, split {result['split']}; baseline: the most frequent training answer "
          "of the question's type)")
    if args.output:
        api.write_json_atomic(args.output, result)
    return 0


def _ask(args) -> int:
    for answer, p in api.vqa_ask(args.model, args.image, args.question, top=args.top, features=args.features):
        print(f"{answer}\t{p:.3f}")
    return 0
