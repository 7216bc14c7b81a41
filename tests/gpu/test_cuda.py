"""catcap on a GPU: every decoder's contract on CUDA, CUDA against CPU, mixed-precision training
steps, and a training run killed and resumed on the GPU.

Skipped where there is no CUDA device (CI has none). On a machine with one:
``python -m pytest tests/gpu`` (``benchmarks/gpu_checks.sh`` runs it with the GPU benchmarks).
TF32 is turned off for the comparisons, so that CUDA's fp32 products are fp32 like the CPU's."""

import os
import subprocess
import sys

import pytest
import torch

from catcap.decoding import beam_search, build_processors, greedy
from catcap.decoding.reference import reference_beam_search
from catcap.training.checkpoint import load_checkpoint
from catcap.training.precision import Precision
from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS, ending_captioner
from tiny_models import FEATURES as F
from tiny_models import VOCAB as V
from tiny_runs import tiny_run_overrides

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: these tests check catcap on a GPU (run them where torch.cuda.is_available())",
                allow_module_level=True)

CUDA = torch.device("cuda")
EOS = 2


def batch(device=CUDA):
    """3 images x 5 regions (2 and 3 padded, with garbage in the padding), 3 captions padded."""
    g = torch.Generator().manual_seed(1)
    features = torch.randn(3, 5, F, generator=g)
    fmask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    features[~fmask] = 100.0
    captions = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 10, 2, 0, 0], [1, 11, 2, 0, 0, 0]])
    return features.to(device), fmask.to(device), captions.to(device), (captions != 0).to(device)


def cuda_model(variant):
    return ending_captioner(variant, eos_id=EOS).to(CUDA)  # captions of varied lengths from an untrained model


@pytest.mark.parametrize("variant", CONTRACT_VARIANTS, ids=CONTRACT_IDS)
def test_teacher_forced_equals_cached_steps_on_cuda(variant):
    model, group = cuda_model(variant), 3
    features, fmask, captions, cmask = batch()
    with torch.no_grad():
        full, _ = model(features, fmask, captions, cmask)
        state = model.init_state(*model.encode(features, fmask), group)
        steps = []
        for t in range(captions.shape[1] - 1):
            logits, state = model.step(captions[:, t].repeat_interleave(group), state)
            steps.append(logits.view(3, group, V))
    cached = torch.stack(steps, 2)
    for b in range(3):
        real = int(cmask[b].sum()) - 1
        for g in range(group):
            torch.testing.assert_close(cached[b, g, :real], full[b, :real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", CONTRACT_VARIANTS, ids=CONTRACT_IDS)
def test_cuda_computes_what_the_cpu_computes(variant):
    """Teacher-forced logits agree to fp32 rounding; greedy and beam-4 captions are the same words."""
    model = cuda_model(variant)
    cpu = cuda_model(variant).cpu()
    kwargs = dict(beam_size=4, max_len=9, length_penalty=1.0, num_return=4)
    with torch.no_grad():
        on_gpu, on_cpu = model(*batch())[0], cpu(*batch("cpu"))[0]
        gpu_beam, cpu_beam = beam_search(model, *batch()[:2], **kwargs), beam_search(cpu, *batch("cpu")[:2], **kwargs)
        gpu_greedy, cpu_greedy = greedy(model, *batch()[:2], max_len=9), greedy(cpu, *batch("cpu")[:2], max_len=9)
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-4, atol=1e-5)
    assert gpu_greedy.tokens.tolist() == cpu_greedy.tokens.tolist()
    assert gpu_beam.tokens.tolist() == cpu_beam.tokens.tolist()
    torch.testing.assert_close(gpu_beam.scores.cpu(), cpu_beam.scores, rtol=0, atol=1e-4)


@pytest.mark.parametrize("variant", CONTRACT_VARIANTS, ids=CONTRACT_IDS)
def test_cached_beam_search_on_cuda_equals_the_reference(variant):
    model = cuda_model(variant)
    features, fmask = batch()[:2]
    rules = {"no_repeat_ngram": 3, "min_len": 2}
    processors = build_processors(EOS, **rules)
    kwargs = dict(beam_size=4, max_len=9, length_penalty=1.0, num_return=4)
    with torch.no_grad():
        out = beam_search(model, features, fmask, processors=processors, **kwargs)
        ref = reference_beam_search(model, features, fmask, rules=rules, **kwargs)
        one = beam_search(model, features, fmask, beam_size=1, max_len=9, processors=processors)
        g = greedy(model, features, fmask, max_len=9, processors=processors)
    assert out.tokens.device.type == "cuda"
    assert out.tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(out.scores.cpu(), ref.scores, rtol=0, atol=1e-5)
    assert torch.equal(one.tokens, g.tokens)


MIXED = [v for v in CONTRACT_VARIANTS if v[1] in ("vanilla", "caca") and not v[2]]


#: seen on an H200 (torch 2.11, 2026-11-27): the tiny official M2's gradients were not finite in
#: fp16 at every scale from 65536 down to 256 (8 steps, all skipped; bf16 and the loss in eval mode
#: are fine). Not reproduced with CPU autocast; strict, so that a fix shows up as XPASS.
M2_FP16 = pytest.mark.xfail(strict=True, reason="official M2 in fp16 on CUDA: non-finite gradients at every loss "
                                                "scale (catcap stops such training: training/precision.py)")
MIXED_CASES = [pytest.param(v, p, marks=[M2_FP16] if v[0] == "m2_official" and p == "fp16" else [],
                            id=f"{'-'.join(v[:2])}-{p}") for v in MIXED for p in ("bf16", "fp16")]


@pytest.mark.parametrize("variant, precision", MIXED_CASES)
def test_a_mixed_precision_training_step_tracks_fp32(precision, variant):
    """Under autocast (as ``catcap train --precision``) the loss is within 2% of fp32's, and
    training steps leave finite weights that moved. The losses are compared with dropout off:
    on an H200 the official M2's train-mode losses differed by 25% between fp32 and bf16/fp16,
    its dropout drawing other masks for half-precision tensors from the same seed. fp16 steps go
    through the gradient scaler, which skips a step whose gradients overflowed and halves its
    scale (the official M2's first steps overflow at the initial scale 65536): a few steps are
    taken until one is applied, and the scale must have come down for each skipped one."""
    model = cuda_model(variant).eval()
    features, fmask, captions, cmask = batch()
    targets = captions[:, 1:][cmask[:, 1:]]

    def loss_of(logits):
        return torch.nn.functional.cross_entropy(logits[cmask[:, 1:]].float(), targets)

    amp = Precision(precision, CUDA)
    with torch.no_grad():
        reference = loss_of(model(features, fmask, captions, cmask)[0]).item()
        with amp.autocast():
            logits = model(features, fmask, captions, cmask)[0]
    assert logits.dtype == {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert abs(loss_of(logits).item() - reference) <= 0.02 * reference
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    for steps in range(1, 9):
        scale = amp.scaler.get_scale() if amp.scaler.is_enabled() else None
        with amp.autocast():
            loss = loss_of(model(features, fmask, captions, cmask)[0])
        amp.backward(loss)
        amp.step(optimizer, list(model.parameters()), grad_clip=1.0)
        if any(not torch.equal(a, b) for a, b in zip(before, model.parameters())):
            break
        assert precision == "fp16" and amp.scaler.get_scale() < scale, "a step was skipped without an overflow"
    after = list(model.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), f"no step applied in {steps} steps"


@pytest.fixture(scope="module")
def gpu_world(tmp_path_factory):
    from catcap.data.synthetic import make_world

    root = tmp_path_factory.mktemp("gpu-world") / "shapes"
    return make_world(root, num_train=40, num_val=10, num_test=10, seed=5, feature_dim=32, progress=False)


def train(args, fault=None):
    """``catcap train ARGS`` in a subprocess, with ``CATCAP_FAULT=fault`` armed (catcap.faults)."""
    env = {k: v for k, v in os.environ.items() if k != "CATCAP_FAULT"}
    if fault:
        env["CATCAP_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "catcap", "train", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, timeout=600)


# CAT with AWC, dropout on; epoch 1 XE, epoch 2 SCST (samples drawn on the GPU): 17 + 4 steps
GPU_RUN = {"train.device": "cuda", "train.deterministic": "true", "model.cross_attention": "caca",
           "train.awc.enabled": "true", "train.objective": "xe_then_scst", "train.scst.switch_patience": 0,
           "train.save_every": 5}


@pytest.mark.parametrize("kill_at", [9, 19])
def test_a_run_killed_on_the_gpu_resumes_to_identical_weights(gpu_world, tmp_path, kill_at):
    """SIGKILL after the kill_at-th log record (XE at 9, SCST at 19), resume: the weights, the
    AWC betas and the position equal the uninterrupted run's (the GPU generator is restored and
    ``train.deterministic`` makes the kernels repeatable)."""
    full = train(tiny_run_overrides(gpu_world, tmp_path / "full", **GPU_RUN))
    assert full.returncode == 0, full.stdout
    args = tiny_run_overrides(gpu_world, tmp_path / "killed", **GPU_RUN)
    killed = train(args, fault=f"runlog.after_append:kill:{kill_at}")
    assert killed.returncode != 0, "the armed fault did not stop the run"
    resumed = train(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stdout
    assert "resumed" in resumed.stdout
    a = load_checkpoint(tmp_path / "full" / "last", with_trainer=True)
    b = load_checkpoint(tmp_path / "killed" / "last", with_trainer=True)
    assert a["trainer"]["position"] == b["trainer"]["position"]
    assert "cuda" in a["trainer"]["rng"], "the checkpoint holds the GPU generator"
    warned = [line for line in full.stdout.splitlines() if "determinis" in line]
    for name, tensor in a["weights"].items():
        assert torch.equal(tensor, b["weights"][name]), f"{name} differs after a kill at record {kill_at}: {warned}"
    assert torch.equal(a["trainer"]["awc"]["beta"], b["trainer"]["awc"]["beta"])
