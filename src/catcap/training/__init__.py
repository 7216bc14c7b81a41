"""Training: losses, schedules, the training loop, checkpoints."""
