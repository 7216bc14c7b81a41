"""``catcap serve``: the web demo (docs/faces.md). The app is :mod:`catcap.web.serve`."""

from __future__ import annotations

import argparse

from catcap.cli import paths

SERVE_HELP = """\
Serve a web page where a person uploads a photo (or picks a sample) and gets its caption, the
attention over the image for each word and, for CAT models, the history weight per word (the
paper's Fig. 5). The same as JSON: POST /api/caption (multipart field "image", optional "beam"
and "max_length"); GET /health. The checkpoint must read raw photos: a model trained on
`catcap extract` features (its checkpoint records the image encoder). The model loads once;
requests run one at a time behind a bounded queue (--queue), excess ones get HTTP 503.
Needs the web extra: pip install -e '.[web]'.

examples:
  catcap serve --checkpoint runs/flickr8k/cat/best
  catcap serve --checkpoint runs/flickr8k/cat/best --samples my_photos/ --port 8080
  catcap serve --checkpoint runs/flickr8k/cat/best --max-upload-mb 5 --max-pixels 12000000 --queue 8 --timeout 20

then open http://127.0.0.1:8000/ or: curl -F image=@photo.jpg -F beam=3 http://127.0.0.1:8000/api/caption
"""


def register(sub) -> None:
    p = sub.add_parser("serve", help="web demo: caption uploaded photos, show attention per word",
                       description=SERVE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="a checkpoint folder written by catcap train "
                   "(trained on `catcap extract` features)")
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


def _serve(args) -> int:
    from catcap.web.serve import check_web_extra

    check_web_extra()  # ValueError naming pip install -e '.[web]'
    import uvicorn

    from catcap.web.serve import create_app
    from catcap.web.serve_limits import Limits

    limits = Limits(max_upload_bytes=int(args.max_upload_mb * 1024 * 1024), max_pixels=args.max_pixels,
                    waiting=args.queue, timeout_s=args.timeout).check()
    app = create_app(args.checkpoint, limits=limits, samples=args.samples, backend=args.backend, device=args.device)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}: anyone who can reach this machine can use the demo")
    print(f"catcap serve: open http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}/ "
          "(Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_graceful_shutdown=5)
    return 0
