"""Latency of ``catcap serve`` for one 224x224 Flickr8k photo, feature extraction included, and
p50/p95 under a burst of concurrent requests (benchmarks/results/serve.md).

    .venv/bin/python benchmarks/serve_latency.py [--checkpoint DIR] [--backend onnx|torch]
        [--requests 20] [--burst 50] [--beam 3] [--out results.json]

Without ``--checkpoint`` a D=256 CAT with the sizes of configs/experiments/flickr8k_cat.yaml
(3+3 layers, 8 heads, d_ff 1024, CACA + AWC) is trained for one epoch on 16 Flickr8k photos in a
temporary folder: enough for timing (the architecture sets the cost; the captions are poor).

Three measurements, each after two warm-up requests:

1. in-process: :meth:`catcap.web.serve_model.PhotoCaptioner.caption` on the decoded photo
   (features + caption + attention) on a worker thread as the server runs it, ``--requests``
   times, with its breakdown;
2. HTTP, one at a time: a real ``python -m catcap serve`` process on 127.0.0.1, ``--requests``
   sequential POSTs of the JPEG file (client wall time: upload, JPEG decoding, features, beam
   search, attention trace, JSON);
3. HTTP burst: ``--burst`` requests released together (threads behind a barrier) against a
   server whose queue holds them all (``--queue burst-1``: latency includes queueing) and
   against the default ``--queue 4`` (most are refused at once with 503).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FLICKR8K = REPO.parent / "shared" / "data" / "flickr8k"


def log(message: str) -> None:
    print(f"[serve_latency {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def photos(count: int) -> list[Path]:
    found = sorted((FLICKR8K / "images").glob("*.jpg"))[:count]
    if len(found) < count:
        raise SystemExit(f"need {count} Flickr8k photos in {FLICKR8K / 'images'}, found {len(found)}")
    return found


def train_d256(root: Path) -> Path:
    """One epoch of a D=256 CAT (flickr8k_cat.yaml's sizes) on 16 photos -> checkpoint dir."""
    from catcap import api
    from catcap.features import ImageEncoder
    from catcap.features.extract import extract_features

    chosen = photos(16)
    folder = root / "photos"
    folder.mkdir()
    for p in chosen:
        shutil.copy(p, folder / p.name)
    log("extracting 16 photos (EfficientNet-Lite0) ...")
    extract_features(folder, root / "feats.h5", ImageEncoder("efficientnet-lite0"), batch_size=16, workers=0,
                     progress=False)
    captions: dict[str, list[str]] = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        key, _, text = line.partition("\t")
        captions.setdefault(key.split("#")[0], []).append(text)
    images = [{"filename": p.name, "split": "train" if i < 12 else "val", "imgid": p.stem,
               "sentences": [{"raw": c} for c in captions[p.name]]} for i, p in enumerate(chosen)]
    (root / "data.json").write_text(json.dumps({"images": images}))
    items = {"data.dataset": root / "data.json", "data.features": root / "feats.h5", "data.min_count": 1,
             "train.epochs": 1, "train.progress": "false", "out_dir": root / "cat"}
    log("training a D=256 CAT for one epoch ...")
    api.train(str(REPO / "configs" / "experiments" / "flickr8k_cat.yaml"), [f"{k}={v}" for k, v in items.items()],
              log=lambda m: None)
    return root / "cat" / "last"


def post(url: str, data: bytes, fields: dict) -> tuple[int, float]:
    """POST the photo as a multipart form -> (status, client seconds)."""
    boundary = "benchBoundary51c2"
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                    for k, v in fields.items())
    body += (f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="photo.jpg"\r\n'
             "Content-Type: image/jpeg\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as err:
        err.read()
        status = err.code
    return status, time.perf_counter() - t0


def percentiles(seconds: list[float]) -> dict:
    if not seconds:
        return {"n": 0}
    a = np.asarray(seconds)
    return {"n": len(a), "p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
            "mean": float(a.mean()), "min": float(a.min()), "max": float(a.max())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m catcap serve`` on a free port of 127.0.0.1 (stopped on exit)."""

    def __init__(self, checkpoint: Path, backend: str, queue: int, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "catcap", "serve", "--checkpoint", str(checkpoint),
                                      "--port", str(self.port), "--backend", backend, "--queue", str(queue),
                                      "--timeout", "600"], stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"the server did not start: {log_path.read_text()[-2000:]}")

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=30) as r:
            return json.loads(r.read())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.out.close()


def burst(url: str, data: bytes, fields: dict, n: int) -> list[tuple[int, float]]:
    """n requests released together; (status, seconds) each."""
    results: list = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        results[i] = post(url, data, fields)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def in_process(checkpoint: Path, photo: Path, backend: str, beam: int, requests: int) -> dict:
    from PIL import Image

    from catcap.decoding import GenerationConfig
    from catcap.web.serve_model import PhotoCaptioner

    model = PhotoCaptioner(checkpoint, backend=backend, log=log)
    setting = GenerationConfig(num_beams=beam)
    with Image.open(photo) as im:
        image = im.convert("RGB")
    walls, parts = [], {"features": [], "caption": [], "attention": []}

    def run() -> str:  # on a worker thread, as the server runs it
        for _ in range(2):
            model.caption(image, setting)
        for _ in range(requests):
            t0 = time.perf_counter()
            result = model.caption(image, setting)
            walls.append(time.perf_counter() - t0)
            for k in parts:
                parts[k].append(result["timings_ms"][k] / 1000)
        return result["caption"]

    with ThreadPoolExecutor(max_workers=1) as pool:
        caption = pool.submit(run).result()
    return {"wall": percentiles(walls), **{k: percentiles(v) for k, v in parts.items()},
            "caption": caption, "backend": model.backend}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint that reads photos (default: train a D=256 CAT)")
    parser.add_argument("--backend", default="onnx", choices=("onnx", "torch"))
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--beam", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the numbers as JSON here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        checkpoint = args.checkpoint or train_d256(tmp)
        photo = photos(1000)[-1]  # not one of the default checkpoint's 16 photos (a Flickr8k train photo)
        from PIL import Image

        with Image.open(photo) as im:
            assert im.size == (224, 224), f"{photo} is {im.size}, expected 224x224"
        data = photo.read_bytes()
        fields = {"beam": str(args.beam), "max_length": "20"}
        log(f"in-process, {args.requests} captions of {photo.name} ...")
        report = {"photo": photo.name, "beam": args.beam, "backend": args.backend, "checkpoint": str(args.checkpoint
                  or "D=256 CAT, 1 epoch on 16 photos"), "in_process": in_process(checkpoint, photo, args.backend,
                                                                                   args.beam, args.requests)}
        with Server(checkpoint, args.backend, args.burst - 1, tmp / "server.log") as server:
            for _ in range(2):
                post(server.url + "/api/caption", data, fields)
            log(f"HTTP, {args.requests} sequential requests ...")
            single = [post(server.url + "/api/caption", data, fields) for _ in range(args.requests)]
            report["http_single"] = percentiles([s for c, s in single if c == 200])
            log(f"HTTP, a burst of {args.burst} (queue {args.burst - 1}) ...")
            answers = burst(server.url + "/api/caption", data, fields, args.burst)
            report["http_burst_all_queued"] = {"statuses": sorted({c: [a[0] for a in answers].count(c)
                                                                   for c, _ in answers}.items()),
                                               "ok": percentiles([s for c, s in answers if c == 200])}
            report["model"] = server.health()["model"]
        with Server(checkpoint, args.backend, 4, tmp / "server4.log") as server:
            post(server.url + "/api/caption", data, fields)
            log(f"HTTP, a burst of {args.burst} (queue 4) ...")
            answers = burst(server.url + "/api/caption", data, fields, args.burst)
            report["http_burst_queue4"] = {"statuses": sorted({c: [a[0] for a in answers].count(c)
                                                               for c, _ in answers}.items()),
                                           "ok": percentiles([s for c, s in answers if c == 200]),
                                           "refused": percentiles([s for c, s in answers if c == 503])}
            report["health_after"] = server.health()["queue"]
    report["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                         "load_before": load_before, "load_after": os.getloadavg(),
                         "torch_threads": __import__("torch").get_num_threads()}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
