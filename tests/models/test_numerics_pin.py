"""Every tiny decoder x cross-attention variant (and the tiny presets built from configs) gives
the numbers pinned in tests/fixtures/numerics/pinned.safetensors, recorded before the CACA
code was made one strategy: teacher forcing, cached decoding with a beam reorder, training
mode under fixed dropout masks and the gradients; and keeps its state-dict names.

Bit for bit where this machine's kernels round as the recording machine's did (the fixture's
canary product is equal), else within a tolerance (another CPU). See tests/numerics_pin.py."""

import pytest
import torch
from numerics_pin import FIXTURE, canary, names, outputs, recorded_names, variants
from safetensors import safe_open

VARIANTS = list(variants())


@pytest.fixture(scope="module")
def pinned():
    with safe_open(str(FIXTURE), "pt") as f:
        tensors = {key: f.get_tensor(key) for key in f.keys()}
        return tensors, recorded_names(f.metadata())


@pytest.mark.parametrize("vid,build", VARIANTS, ids=[v for v, _ in VARIANTS])
def test_outputs_and_names_are_the_pinned_ones(pinned, vid, build):
    tensors, recorded = pinned
    model = build()
    assert names(model) == recorded[vid], "state-dict names changed: old checkpoints would not load"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as recorded
    try:
        got = outputs(model)
    finally:
        torch.set_num_threads(threads)
    expected = {key.split("/", 1)[1]: value for key, value in tensors.items() if key.startswith(vid + "/")}
    assert set(got) == set(expected)
    exact = torch.equal(canary(), tensors["canary"])
    for key, value in expected.items():
        if exact:
            assert torch.equal(got[key], value), f"{vid} {key}: max diff {(got[key] - value).abs().max():.3g}"
        else:
            torch.testing.assert_close(got[key], value, rtol=1e-4, atol=1e-5, msg=f"{vid} {key}")
