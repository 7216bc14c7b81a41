"""Perplexity of a captioner on reference captions.

``perplexity(log_probs, mask)`` = exp(- sum(mask * log p) / sum(mask)): the exponentiated
mean negative log-likelihood per real (unmasked) token, natural log. Pass the log-probability
the model gave each reference token (``<eos>`` included, ``<pad>`` masked out). Works with
numpy arrays and with torch tensors (read without importing torch).
"""

from __future__ import annotations

import numpy as np

from catcap.metrics.errors import MetricInputError


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, possibly on a GPU
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def perplexity(log_probs, mask=None) -> float:
    """Token-level perplexity. log_probs: (B, T) or (N,) log p of each token; mask: same
    shape, True where the token is real. Raises on an empty mask or positive log-probs."""
    lp = _as_numpy(log_probs)
    m = np.ones_like(lp, dtype=bool) if mask is None else _as_numpy(mask).astype(bool)
    if m.shape != lp.shape:
        raise MetricInputError(f"perplexity: mask shape {m.shape} differs from log_probs shape {lp.shape}")
    if not m.any():
        raise MetricInputError("perplexity: no real tokens (the mask is all False)")
    values = lp[m]
    if np.isnan(values).any():
        raise MetricInputError("perplexity: log_probs contain NaN; check the model output")
    if np.any(values > 1e-6):
        raise MetricInputError(
            "perplexity: expected log-probabilities (<= 0), found positive values; pass "
            "log_softmax outputs gathered at the reference tokens, not logits"
        )
    return perplexity_from_nll(float(-values.sum()), int(m.sum()))


def perplexity_from_nll(total_nll: float, num_tokens: int) -> float:
    """exp(total negative log-likelihood / number of tokens)."""
    if num_tokens <= 0:
        raise MetricInputError(f"perplexity: num_tokens must be positive, got {num_tokens}")
    with np.errstate(over="ignore"):
        return float(np.exp(total_nll / num_tokens))  # inf when a token had probability 0
