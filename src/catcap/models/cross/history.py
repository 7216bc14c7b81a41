"""Attention over image regions and a historical context memory in one softmax (SPEC.md §3).

CACA's final pass attends to ``K' = [X; HCM]``: the regions ``X`` (B images, shared by the G
hypotheses of an image) and the history entries (one memory per hypothesis). Concatenating
them would copy the regions once per hypothesis; instead the scores of the two blocks are
computed separately, joined for one softmax, and split again:

    s = [q K_X^T, q K_HCM^T] / sqrt(d_k),  alpha = softmax(s),
    out = alpha_X V_X + alpha_HCM V_HCM,    a = sum_i alpha_HCM,i  (the history weight)

Several encoder levels (M2): queries and region keys are level-heads (L*H of them, see
:mod:`catcap.models.attention`); a history is either one per level (L*H heads, CACA's default
in a meshed decoder) or one shared by every level (H heads: LightCACA, whose entries are the
queries, and CACA with ``placement="gated"``). A shared history is scored once, with the
query's first level (every level's query is the same), and its result is broadcast to the levels.

Legend: B images, G hypotheses per image, R = B * G rows, H heads (L*H level-heads), T
queries per row, N regions, M history entries, d_k = D / H. Masks are bool, True = may attend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from catcap.models.attention import KeyValue


@dataclass
class HistoryAttention:
    """Result of :func:`attend_with_history`: heads (R, H, T, d_k), the final-pass weights on
    regions (R, H, T, N) (``None`` without regions) and on history (R, H, T, M) (``None``
    without history), and the history weight ``a`` (R, H, T); H counts level-heads."""

    heads: Tensor
    region_weights: Tensor | None
    history_weights: Tensor | None
    history_weight: Tensor


def group_rows(x: Tensor, b: int, g: int) -> Tensor:
    """(R, H, T, k) -> (B, H, G*T, k): an image's hypotheses side by side as queries."""
    _, h, t, k = x.shape
    return x.view(b, g, h, t, k).transpose(1, 2).reshape(b, h, g * t, k)


def ungroup_rows(x: Tensor, g: int) -> Tensor:
    """(B, H, G*T, k) -> (R, H, T, k), the inverse of :func:`group_rows`."""
    b, h, gt, k = x.shape
    return x.view(b, h, g, gt // g, k).transpose(1, 2).reshape(b * g, h, gt // g, k)


def history_extras(out: HistoryAttention) -> dict:
    """A multi-head pass's extras: ``history_weight`` a, ``region_attention`` and
    ``history_attention`` (the final pass's weights on each block, None where it is absent)."""
    return {"history_weight": out.history_weight, "region_attention": out.region_weights,
            "history_attention": out.history_weights}


def _by_level(x: Tensor, heads: int) -> Tensor:
    """(R, L*heads, ...) -> (R, L, heads, ...): a view that broadcasts against a shared history."""
    return x.view(x.shape[0], x.shape[1] // heads, heads, *x.shape[2:])


def _history_scores(q: Tensor, history: KeyValue) -> Tensor:
    """q (R, L*H, T, d_k) against history keys with L*H or H heads -> scores (R, heads of the
    history, T, M), scaled by 1/sqrt(d_k) (a shared history is scored with the first level's
    query, the same as every level's)."""
    heads = history.k.shape[1]
    return (q[:, :heads] @ history.k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.shape[-1]))


def _history_values(weights: Tensor, history: KeyValue) -> Tensor:
    """weights (R, L'*H', T, M) over the entries (H' heads) -> sum_m w_m V_m, (R, L'*H', T, d_k):
    a history shared by the levels (L' > 1) is read by every level."""
    part = _by_level(weights, history.v.shape[1]) @ history.v[:, None]  # (R, L', H', T, d_k)
    return part.view(*weights.shape[:3], -1)


def attend_with_history(q: Tensor, regions: KeyValue | None, region_mask: Tensor | None,
                        history: KeyValue | None, history_mask: Tensor | None, group: int = 1,
                        dropout: float = 0.0) -> HistoryAttention:
    """One softmax over regions and history.

    q (R, L*H, T, d_k); regions: contiguous level-head keys of B images (N each) with region_mask
    (B, N), or None (OHC); history: keys of R rows (M each; L*H or H heads) with history_mask
    broadcastable to (R, 1, T, M) or None (all allowed), or history None (no entries yet).
    Every query must be allowed a key.
    """
    rows, _, t, d_k = q.shape
    scale = 1.0 / math.sqrt(d_k)
    blocks = []
    if regions is not None:
        b = regions.k.shape[0]
        s = (group_rows(q, b, group) @ regions.k.transpose(-2, -1)).mul_(scale)  # (B, H, G*T, N)
        blocks.append(ungroup_rows(s.masked_fill_(~region_mask[:, None, None, :], float("-inf")), group))
    if history is not None:
        s = _history_scores(q, history)  # (R, H', T, M)
        s = s if history_mask is None else s.masked_fill_(~history_mask, float("-inf"))
        if s.shape[1] != q.shape[1]:  # a shared history: the same scores for every level
            s = s[:, None].expand(rows, q.shape[1] // s.shape[1], *s.shape[1:]).reshape(rows, q.shape[1], t, -1)
        blocks.append(s)
    if not blocks:
        raise ValueError("attention needs regions or history entries; OHC at the first step needs its own entry")
    weights = torch.cat(blocks, dim=-1).softmax(dim=-1)
    dropped = F.dropout(weights, dropout) if dropout > 0 else weights
    n = regions.k.shape[2] if regions is not None else 0
    parts = []
    if regions is not None:
        parts.append(ungroup_rows(group_rows(dropped[..., :n], b, group) @ regions.v, group))
    if history is not None:
        parts.append(_history_values(dropped[..., n:], history))
    heads = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    history_weights = weights[..., n:] if history is not None else None
    total = history_weights.sum(-1) if history is not None else q.new_zeros(rows, q.shape[1], t)
    return HistoryAttention(heads, weights[..., :n] if regions is not None else None, history_weights, total)


@dataclass
class RegionPass:
    """CACA's first pass over the regions, kept for the final pass: heads (R, H, T, d_k), the
    softmax weights (R, H, T, N) and the log of their normaliser logsumexp(s_X) (R, H, T, 1)."""

    heads: Tensor
    weights: Tensor
    log_norm: Tensor


def attend_regions(q: Tensor, regions: KeyValue, region_mask: Tensor, group: int = 1) -> RegionPass:
    """First pass: softmax(q K_X^T / sqrt(d_k)) V_X, keeping what :func:`attend_after_regions`
    needs. q (R, H, T, d_k); regions of B images with region_mask (B, N)."""
    b, scale = regions.k.shape[0], 1.0 / math.sqrt(q.shape[-1])
    s = (group_rows(q, b, group) @ regions.k.transpose(-2, -1)).mul_(scale)
    s = s.masked_fill_(~region_mask[:, None, None, :], float("-inf"))  # (B, H, G*T, N)
    log_norm = torch.logsumexp(s, dim=-1, keepdim=True)
    alpha = (s - log_norm).exp_()
    return RegionPass(ungroup_rows(alpha @ regions.v, group), ungroup_rows(alpha, group), ungroup_rows(log_norm, group))


def attend_after_regions(q: Tensor, first: RegionPass, history: KeyValue | None, history_mask: Tensor | None,
                         regions_in_final: bool = True) -> HistoryAttention:
    """CACA's final pass with shared weights, reusing the first pass (no dropout).

    Both passes use the same projected query and region keys, so the region logits are the
    same; with Z_X, Z_HCM the sums of exp(logits) over each block, attending to [X; HCM] is

        out = (1 - a) * first-pass heads + a * softmax(s_HCM) V_HCM,
        a   = Z_HCM / (Z_X + Z_HCM) = sigmoid(logsumexp(s_HCM) - logsumexp(s_X))

    — exactly :func:`attend_with_history`, without attending to the regions a second time.
    ``regions_in_final=False`` (OHC): a = 1. q (R, L*H, T, d_k); history (R rows, L*H or H
    heads) or None.
    """
    if history is None:  # IHC's first step: nothing to look back at
        return HistoryAttention(first.heads, first.weights, None, first.heads.new_zeros(first.heads.shape[:3]))
    s = _history_scores(q, history)  # (R, H', T, M)
    if history_mask is not None:
        s = s.masked_fill_(~history_mask, float("-inf"))
    log_norm = torch.logsumexp(s, dim=-1, keepdim=True)  # -inf where a query sees no entry (IHC, t = 1)
    alpha = (s - log_norm.nan_to_num(neginf=0.0)).exp_()
    heads = history.k.shape[1]
    a = (torch.sigmoid(_by_level(log_norm, heads) - _by_level(first.log_norm, heads)) if regions_in_final
         else torch.ones_like(_by_level(first.log_norm, heads)))  # (R, L', H', T, 1)
    shape = first.heads.shape[:3]
    read = _history_values(alpha, history)[:, None]  # (R, 1, H', T, d_k)
    first_heads = _by_level(first.heads, heads)  # under autocast a (from logsumexp) is fp32, the reads are not
    mixed = torch.lerp(first_heads, read.to(first_heads.dtype), a.to(first_heads.dtype))  # (1 - a) first + a history
    region_weights = (_by_level(first.weights, heads) * (1 - a)).view(*shape, -1) if regions_in_final else None
    history_weights = (alpha[:, None] * a).view(*shape, -1)
    return HistoryAttention(mixed.view(*shape, -1), region_weights, history_weights, a.view(shape))
