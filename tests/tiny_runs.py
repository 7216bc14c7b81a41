"""Overrides for fast CPU training runs on a small built-in world, shared by tests/e2e and
tests/distributed (importable as ``tiny_runs``: pytest puts tests/ on sys.path for the root conftest)."""

import os
import random

KILL_SEED_VARIABLE = "CATCAP_KILL_SEED"


def tiny_run_overrides(world, out_dir, **extra) -> list[str]:
    """key=value list: a 1+2-layer D=32 model, batch 12, 2 epochs, warm-up 20, no progress bars."""
    items = {
        "data.dataset": world.dataset, "data.features": world.features, "data.min_count": 1,
        "model.feature_dim": 32, "model.d_model": 32, "model.num_heads": 2, "model.encoder_layers": 1,
        "model.decoder_layers": 2, "model.d_ff": 64, "out_dir": out_dir, "train.batch_size": 12,
        "train.epochs": 2, "train.schedule.warmup": 20, "train.progress": False, "train.log_every": 1,
    }
    items.update(extra)
    return [f"{k}={v}" for k, v in items.items()]


def kill_step(low: int, high: int) -> tuple[int, int]:
    """(step, seed): the step in [low, high] at which a kill-and-resume test kills its run. The
    seed is ``$CATCAP_KILL_SEED`` when set, else a fresh one, so that runs cover different steps;
    it is printed (pytest shows it with a failure) and a failure replays with
    ``CATCAP_KILL_SEED=<seed>``."""
    seed = int(os.environ.get(KILL_SEED_VARIABLE) or random.SystemRandom().randrange(2 ** 32))
    step = random.Random(seed).randint(low, high)
    print(f"killing at step {step}: seed {seed} (replay with {KILL_SEED_VARIABLE}={seed})")
    return step, seed
