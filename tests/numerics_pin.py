"""Outputs of every tiny decoder x cross-attention variant, pinned bit for bit (CPU fp32).

Refactors of the attention code must not move any existing model's numbers: a checkpoint
trained before them must decode and train exactly as it did. For every variant of the
decoder contract (``tiny_models.CONTRACT_VARIANTS``) and for the tiny presets built from
configs, :func:`outputs` computes, from weights set by parameter *name* (so that the order
in which modules are built does not matter, and a renamed parameter fails loudly):

- ``teacher``: teacher-forced logits in eval mode, and ``history``: every layer's history
  weights (CACA / LightCACA);
- ``steps``: cached decoding logits, two hypotheses per image, with a beam reorder after
  the second step (the decoding memories' in-place buffers and their gathers);
- ``train``: teacher-forced logits in training mode under a fixed seed (dropout masks), and
  ``grads``: the sum of |gradient| of every parameter for a fixed loss on them.

``python tests/numerics_pin.py`` writes ``tests/fixtures/numerics/pinned.safetensors`` (run it
on the commit whose numbers are to be kept); ``tests/models/test_numerics_pin.py`` compares.
Every file also records a canary product: where a machine's kernels round differently (a
different CPU), the comparison falls back to a tolerance instead of bit equality.
"""

from __future__ import annotations

import base64
import json
import sys
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import CONTRACT_VARIANTS, FEATURES, VOCAB, contract_batch, tiny_captioner  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "numerics" / "pinned.safetensors"
REPO = Path(__file__).parents[1]
#: tiny presets built through ModelConfig and the builders, with the options set on top
PRESETS = {
    "cfg-tiny-cat": ("tiny.yaml", {"cross_attention": "caca"}),
    "cfg-m2-caca-tiny": ("m2_caca_tiny.yaml", {"history": {"placement": "gated"}}),
    "cfg-updown-tiny-caca": ("updown_tiny.yaml", {"cross_attention": "caca"}),
    "cfg-lookback-light": ("updown_tiny.yaml", {"decoder": "lookback", "cross_attention": "light_caca"}),
    "cfg-att2in-caca-ohc": ("updown_tiny.yaml", {"decoder": "att2in", "cross_attention": "caca",
                                                 "history": {"strategy": "ohc"}}),
    "cfg-aoanet-tiny-caca": ("aoanet_tiny.yaml", {"cross_attention": "caca", "history": {"shared": False}}),
}


def set_weights(model: torch.nn.Module) -> None:
    """Every parameter from a generator seeded by its name: matrices U(+-1/sqrt(fan_in)),
    LayerNorm weights around 1, other vectors small."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            if p.dim() >= 2:
                bound = p.shape[-1] ** -0.5
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def preset_captioner(name: str):
    from catcap.config import from_dict, read_yaml
    from catcap.models.builders import build_captioner
    from catcap.models.config import ModelConfig

    base, options = PRESETS[name]
    raw = read_yaml(REPO / "configs" / "models" / base)["model"]
    raw.update({k: v for k, v in options.items() if k != "history"})
    raw["history"] = {**raw.get("history", {}), **options.get("history", {})}
    raw["feature_dim"] = FEATURES
    return build_captioner(from_dict(ModelConfig, raw, "model"), VOCAB).eval()


def variants():
    """(id, build) for every pinned model (the official M2, added after the pin was first
    recorded, is pinned from its first version on)."""
    for arch, cross, options in CONTRACT_VARIANTS:
        vid = "-".join([arch, cross, *(f"{k}={v}" for k, v in options.items())])
        yield vid, (lambda a=arch, c=cross, o=options: tiny_captioner(a, c, o))
    for name in PRESETS:
        yield name, (lambda n=name: preset_captioner(n))


def outputs(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    set_weights(model)
    features, fmask, captions, cmask = contract_batch()
    out = {}
    model.eval()
    with torch.no_grad():
        logits, extras = model(features, fmask, captions, cmask)
        out["teacher"] = logits
        weights = [e["history_weight"] for e in extras if e]
        if weights:
            out["history"] = torch.cat([w.reshape(-1) for w in weights])
        memory, mask = model.encode(features, fmask)
        state = model.init_state(memory, mask, 2)
        steps = []
        for t in range(3):
            step_logits, state = model.step(captions[:, min(t, 2)].repeat_interleave(2), state)
            steps.append(step_logits)
            if t == 1:
                state = state.reorder(torch.tensor([1, 0, 2, 2, 5, 4]))
        out["steps"] = torch.stack(steps)
    model.train()
    torch.manual_seed(5)
    logits, _ = model(features, fmask, captions, cmask)
    out["train"] = logits.detach()
    target = torch.randn(logits.shape, generator=torch.Generator().manual_seed(2))
    (logits * target).sum().backward()
    out["grads"] = torch.stack([p.grad.abs().sum() if p.grad is not None else torch.tensor(-1.0)
                                for _, p in sorted(model.named_parameters())])
    model.zero_grad()
    return out


def names(model: torch.nn.Module) -> list[str]:
    return sorted(model.state_dict())


def recorded_names(metadata: dict) -> dict[str, list[str]]:
    """The state-dict names of every pinned model, as :func:`record` packed them."""
    return json.loads(zlib.decompress(base64.b64decode(metadata["names"])))


def canary() -> torch.Tensor:
    """A product whose last bits depend on the machine's GEMM kernels."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(37, 53, generator=g), torch.randn(53, 29, generator=g)
    return torch.nn.functional.linear(a, b.t()).softmax(-1)


def record() -> None:
    from safetensors.torch import save_file

    tensors, meta = {"canary": canary()}, {}
    for vid, build in variants():
        model = build()
        meta[vid] = names(model)
        for key, value in outputs(model).items():
            tensors[f"{vid}/{key}"] = value.contiguous()
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    packed = base64.b64encode(zlib.compress(json.dumps(meta).encode(), 9)).decode()
    save_file(tensors, str(FIXTURE), metadata={"names": packed})
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes, {len(meta)} models)")


if __name__ == "__main__":
    torch.set_num_threads(1)
    record()
