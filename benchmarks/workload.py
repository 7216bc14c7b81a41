"""The paper-size decoding workload that the speed harnesses share (decode.py, gemm_floor.py,
flops.py, reference_sc.py, the lever studies, gpu/targets.py).

The paper's decoding-time table (Table 3) times batches of 50 images; the harnesses build the
models with random weights on inputs of this size:

- ``V``: vocabulary size, 10,000;
- ``B``: images per batch, 50;
- ``N``: regions per image, 50;
- ``F``: feature size per region, 2048;
- ``T``: words per caption, 16 (decoding runs all 16 steps, ``<eos>`` suppressed);
- ``JOBS``: the three timed jobs: greedy decoding, beam-5 decoding, one XE training step;
- ``PRESETS``: the model presets (``configs/models/<name>.yaml``) the harnesses build.
"""

from pathlib import Path

V, B, N, F, T = 10000, 50, 50, 2048, 16
JOBS = ("greedy", "beam", "train_step")
PRESETS = Path(__file__).resolve().parents[1] / "configs" / "models"
