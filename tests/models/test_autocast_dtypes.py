"""Every decoder runs under autocast when some ops come back in fp32, as on a GPU.

CUDA's autocast computes ``logsumexp`` (and other reductions) in fp32 while products come back
in bf16/fp16; CPU autocast keeps ``logsumexp`` in bf16, so a plain CPU run cannot show a
dtype clash between the two (CACA's history gate once met the reads in ``torch.lerp`` that way
and stopped every CAT run with ``--precision bf16`` on a GPU). Here ``logsumexp`` is made to
return fp32 as CUDA's autocast does, and every decoder's forward and cached steps must run and
agree. tests/gpu/test_cuda.py runs the real thing on a GPU."""

import pytest
import torch

from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS, tiny_captioner
from tiny_models import FEATURES as F


@pytest.fixture
def cuda_like_logsumexp(monkeypatch):
    original = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda *args, **kwargs: original(*args, **kwargs).float())


@pytest.mark.parametrize("variant", CONTRACT_VARIANTS, ids=CONTRACT_IDS)
def test_bf16_autocast_with_fp32_reductions(variant, cuda_like_logsumexp):
    model = tiny_captioner(*variant)
    g = torch.Generator().manual_seed(1)
    features = torch.randn(2, 4, F, generator=g)
    fmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    captions = torch.tensor([[1, 5, 6, 7, 2], [1, 9, 2, 0, 0]])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        full, _ = model(features, fmask, captions, captions != 0)
        state = model.init_state(*model.encode(features, fmask), 1)
        for t in range(3):
            step, state = model.step(captions[:, t], state)
    assert torch.isfinite(full.float()).all()
    torch.testing.assert_close(step.float(), full[:, 2].float(), rtol=0.05, atol=0.05)
