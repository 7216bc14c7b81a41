"""``catcap serve``: the web demo (docs/faces.md). The app is :mod:`catcap.web.serve`."""

from __future__ import annotations

import argparse

from catcap.cli import paths

SERVE_HELP = """\
Serve a web page where a person uploads a photo (or picks a sample) and gets its caption and,
for models that record it, where in the photo each word looked and, for CAT models, the
history weight per word (the paper's Fig. 5); for other models the page says there is none.
Without --checkpoint it serves the model `catcap caption` uses (the bundled flickr8k-m2:
the best scores, no attention map) and offers every bundled model on the page (flickr8k-cat
shows where each word looked); a zoo name or a checkpoint folder picks the served one. The same
as JSON: POST /api/caption (multipart field "image", optional "beam", "max_length" and
"model"); GET /health. A checkpoint must read raw photos: a model trained on `catcap extract`
features (its checkpoint records the image encoder). The served model loads once, another
one when the page first picks it; requests run one at a time behind a bounded queue (--queue),
excess ones get HTTP 503. Needs the web extra: pip install -e '.[web]'.

examples:
  catcap serve
  catcap serve --checkpoint flickr8k-cat
  catcap serve --checkpoint runs/flickr8k/cat/best --samples my_photos/ --port 8080
  catcap serve --checkpoint runs/flickr8k/cat/best --max-upload-mb 5 --max-pixels 12000000 --queue 8 --timeout 20

then open http://127.0.0.1:8000/ or: curl -F image=@photo.jpg -F beam=3 http://127.0.0.1:8000/api/caption
"""


def register(sub) -> None:
    p = sub.add_parser("serve", help="web demo: caption photos in the browser, see where each word looked",
                       description=SERVE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", metavar="DIR", help="a zoo model's name or folder, or a checkpoint folder written "
                   "by catcap train (trained on `catcap extract` features); default: the bundled model, as catcap "
                   "caption")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                   "only; 0.0.0.0 opens the demo to your network)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--samples", metavar="DIR", help="a folder of .jpg/.png/.webp photos offered as samples")
    p.add_argument("--max-upload-mb", type=float, default=10.0, help="largest upload in MB (default 10)")
    p.add_argument("--max-pixels", type=int, default=25_000_000, help="most pixels per photo, checked from the "
                   "header before decoding (default 25000000)")
    p.add_argument("--queue", type=int, default=4, help="requests that may wait while one runs; more get HTTP 503 "
                   "(default 4)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request, waiting included; later "
                   "answers are HTTP 504 (default 30)")
    p.add_argument("--backend", choices=("auto", "onnx", "torch"), default="auto", help="runs the image encoder: "
                   "onnx (ONNX Runtime, faster on CPUs), torch, or auto = onnx when installed (default)")
    p.add_argument("--device", default="cpu", help="device of the captioning model: cpu (default), cuda, auto")
    paths.declare(p, checkpoint=paths.CHECKPOINT, samples=paths.PHOTOS)
    p.set_defaults(func=_serve)


def bundled_choices() -> dict[str, str]:
    """{zoo name: label} of the bundled models the page offers: the name, the kind of model and
    its validation CIDEr-D (from its config and card; no weights are read here)."""
    import json
    from types import SimpleNamespace

    from catcap import zoo
    from catcap.models.parts import model_name

    labels = {}
    for entry in zoo.list_models():
        model = json.loads((entry.path / "config.json").read_text(encoding="utf-8"))["config"]["model"]
        kind = model_name(SimpleNamespace(decoder=model.get("decoder"), cross_attention=model.get("cross_attention")))
        score = entry.scores.get("CIDEr")
        labels[entry.name] = f"{entry.name}: {kind}" + (f", val CIDEr-D {100 * float(score):.1f}" if score else "")
    return labels


def _serve(args) -> int:
    from catcap.web.serve import check_web_extra

    check_web_extra()  # ValueError naming pip install -e '.[web]'
    import uvicorn

    from catcap.web.serve import create_app
    from catcap.web.serve_limits import Limits

    limits = Limits(max_upload_bytes=int(args.max_upload_mb * 1024 * 1024), max_pixels=args.max_pixels,
                    waiting=args.queue, timeout_s=args.timeout).check()
    checkpoint, choices = args.checkpoint, bundled_choices()
    if checkpoint is None:
        from catcap import api

        entry = api.bundled_model()
        checkpoint = entry.name
        print(f"catcap serve: serving the bundled model {entry.name} ({entry.path}; --checkpoint picks another)",
              flush=True)
    app = create_app(checkpoint, limits=limits, samples=args.samples, backend=args.backend, device=args.device,
                     choices=choices)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}: anyone who can reach this machine can use the demo")
    print(f"catcap serve: open http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}/ "
          "(Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_graceful_shutdown=5)
    return 0
