"""The jobs that benchmarks/contention.py times beside competitor processes (its module doc
describes them), built once per runner process; benchmarks/studies/omp_gaps.py and
pacing_hook_cost.py build the same jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT.parent / "shared" / "data" / "flickr8k" / "images"
JOBS = ("demo_train", "greedy", "beam", "xe_step", "extract")


def src_pythonpath() -> str:
    """PYTHONPATH for a child process that must import this tree's catcap."""
    return os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))


def build_jobs(args) -> dict:
    """Job name -> a callable running it once (after one warm-up run each)."""
    import torch

    jobs = {}
    wanted = set(args.jobs)
    if wanted & {"greedy", "beam", "xe_step"}:
        from decode import Bench  # beside this file, on the importer's path
        from workload import B, F, N, T, V

        images = args.images_per_batch or B
        torch.manual_seed(0)
        feats, mask = torch.randn(images, N, F), torch.ones(images, N, dtype=torch.bool)
        captions = torch.randint(4, V, (images, T + 2))
        captions[:, 0], captions[:, -1] = 1, 2
        bench = Bench("transformer", (feats, mask, captions), torch.device("cpu"))
        jobs.update(greedy=bench.greedy, beam=bench.beam, xe_step=bench.train_step)
    if "demo_train" in wanted:
        jobs["demo_train"] = demo_steps(Path(args.work), args.demo_steps, os.environ.get("CATCAP_THREADS", "x"))
    if "extract" in wanted:
        jobs["extract"] = extraction(Path(args.work), args.photos, os.environ.get("CATCAP_THREADS", "x") + str(os.getpid()))
    jobs = {name: jobs[name] for name in args.jobs}
    for run in jobs.values():
        run()  # warm-up: first-call allocations, oneDNN's kernels, the DataLoader's imports
    return jobs


def demo_steps(work: Path, steps: int, tag: str):
    """``steps`` optimizer steps of the demo's Trainer (demo.yaml) on batches of the shapes world
    in ``work``/world (made by the parent), cycled."""
    import torch
    from torch.utils.data import DataLoader

    from catcap.data.collate import collate_captions
    from catcap.demo import demo_config
    from catcap.training.loop import Trainer

    cfg = demo_config(work, [f"out_dir={work / ('model-' + tag + str(os.getpid()))}", "train.progress=false"])
    trainer = Trainer(cfg, log=lambda *_: None)
    batches = list(DataLoader(trainer.data.train, batch_size=cfg.train.batch_size, collate_fn=collate_captions,
                              generator=torch.Generator().manual_seed(0), shuffle=True))
    batches = [b for b in batches if len(b.image_ids) == cfg.train.batch_size] or batches

    def run():
        for i in range(steps):
            trainer.train_step(batches[i % len(batches)])

    return run


def extraction(work: Path, photos: int, tag: str):
    """``catcap extract``'s work on the first ``photos`` Flickr8k photos, into a fresh .h5 each run
    (the encoder built once, as the command builds it once per run)."""
    from catcap.features import extract_features, make_encoder

    paths = sorted(IMAGES.glob("*.jpg"))[:photos]
    if len(paths) < photos:
        raise SystemExit(f"expected {photos} photos in {IMAGES}, found {len(paths)}; lower --photos or "
                         "leave extract out of --jobs")
    encoder = make_encoder("efficientnet-lite0", "torch")
    out = work / f"extract-{tag}.h5"

    def run():
        extract_features(paths, out, encoder, resume=False, overwrite=True, progress=False)

    return run


def make_world(work: Path, num_train: int) -> None:
    """The demo's shapes world, small (its training steps cycle through its batches)."""
    code = ("import sys; from catcap.data.synthetic import make_world; "
            f"make_world(sys.argv[1], num_train={num_train}, num_val=10, num_test=10, seed=0, progress=False)")
    env = dict(os.environ, PYTHONPATH=src_pythonpath())
    subprocess.run([sys.executable, "-c", code, str(work / "world")], check=True, env=env)
