"""Overrides for fast CPU training runs on a small built-in world, shared by tests/e2e and
tests/distributed (importable as ``tiny_runs``: pytest puts tests/ on sys.path for the root conftest)."""


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
