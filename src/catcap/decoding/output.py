"""What generation returns (:class:`GenerationOutput`), and the per-step record of attention
maps and history weights that travels with the hypotheses (:class:`StepRecord`).

Legend: B images, R rows (hypotheses the model steps), T output steps (words + ``<eos>``),
L decoder layers, H heads (level-heads in a meshed decoder), N regions, M history entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: per-step extras the record keeps, by the name ``decoder.step`` reports them under
ATTENTION_MAPS = {"region_attentions": "region_attention", "history_attentions": "history_attention"}
HISTORY_WEIGHTS = {"history_weights": "history_weight"}


@dataclass
class GenerationOutput:
    """Generated captions, image-major (row ``b * group + g`` = caption ``g`` of image ``b``).

    tokens: (R, T) generated ids after ``<bos>``: words, ``<eos>``, then ``<pad>``;
    log_probs: (R,) sum of the per-token model log-probabilities (``<eos>`` included);
    lengths: (R,) generated tokens including the final ``<eos>`` (= words + 1);
    token_log_probs: (R, T) per-token model log-probabilities, 0 after ``<eos>``;
    mask: (R, T) bool, True = generated token (words and ``<eos>``), False = padding;
    scores: (R,) ranking score (beam search: length-penalised, with diverse beam search's
    penalties), else equal to ``log_probs``; group: rows per image.

    With ``output_attentions`` (None otherwise, or when the decoder reports none, e.g. vanilla
    cross attention has no weights to report and ``ohc`` no region weights):
    region_attentions (R, T, L, H, N): at the step that chose token t, each layer's and head's
    final-pass weights over the image regions; history_attentions (R, T, L, H, M): the weights
    over the history entries, entry j being the one written at step j (0 where not yet written).
    With ``output_history_weights``: history_weights (R, T, L, H), the total weight on the
    history (``a_t`` of the CAT paper). All are those of the returned caption's own steps (for
    beams: followed back through every reorder) and 0 where ``mask`` is False.
    """

    tokens: Tensor
    log_probs: Tensor
    lengths: Tensor
    token_log_probs: Tensor
    mask: Tensor
    scores: Tensor
    group: int = 1
    region_attentions: Tensor | None = None
    history_attentions: Tensor | None = None
    history_weights: Tensor | None = None


def _layers(extras: list[dict], key: str) -> Tensor | None:
    """One step's extras of every layer -> (R, L, H, ...) for ``key`` (the step axis, of length
    1, dropped); None when some layer reports none."""
    maps = [layer.get(key) for layer in extras]
    if not maps or any(m is None for m in maps):
        return None
    return torch.stack([m[:, :, 0].float() for m in maps], 1)


class StepRecord:
    """The per-step extras the config asked for, kept per model row and step, plus every
    reorder's source rows, so that a finished caption's own steps can be read back
    (:meth:`follow`). Made only when the config asks for them: without it the loop keeps nothing."""

    def __init__(self, attentions: bool, history_weights: bool):
        self.keys = {**(ATTENTION_MAPS if attentions else {}), **(HISTORY_WEIGHTS if history_weights else {})}
        self.steps: list[dict[str, Tensor | None]] = []
        self.sources: list[Tensor | None] = []  # sources[s]: for each row of step s, its row at step s-1
        self._next_source: Tensor | None = None

    def add(self, extras: list[dict]) -> None:
        """The extras ``decoder.step`` reported for this step (one dict per layer)."""
        if extras is None:
            raise ValueError("output_attentions / output_history_weights need a model whose step reports its "
                             "attention (a catcap CaptionModel); this model reports none")
        self.steps.append({name: _layers(extras, key) for name, key in self.keys.items()})
        self.sources.append(self._next_source)
        self._next_source = None

    def select(self, index: Tensor) -> None:
        """The rows of the last step become ``index``'s (beam search's first step, run once per
        image and then copied to its beams)."""
        self.steps[-1] = {k: None if v is None else v.index_select(0, index) for k, v in self.steps[-1].items()}

    def reordered(self, rows: Tensor | None) -> None:
        """The next step's row i continues this step's row ``rows[i]`` (None: row i)."""
        self._next_source = rows

    def follow(self, rows: Tensor, lengths: Tensor, mask: Tensor) -> dict[str, Tensor | None]:
        """Per returned caption the extras of its own steps: ``rows`` (R',) its row at its last
        step ``lengths - 1`` -> {field: (R', T, L, H, ...)} zero where ``mask`` (R', T) is False."""
        width, out = mask.shape[1], {}
        path = self._paths(rows, lengths - 1, width)  # (R', T) row at every step
        for name in self.keys:
            steps = [step[name] for step in self.steps[:width]]
            some = next((x for x in steps if x is not None), None)
            if some is None or (name != "history_attentions" and any(x is None for x in steps)):
                out[name] = None
                continue
            # a step without history entries (ihc's first) reports none: zero entries
            picked = [(x if x is not None else some[..., :0])[path[:, s]] for s, x in enumerate(steps)]
            if name == "history_attentions":  # history entries grow by one per step: pad to the widest
                entries = max(p.shape[-1] for p in picked)
                picked = [torch.nn.functional.pad(p, (0, entries - p.shape[-1])) for p in picked]
            values = torch.stack(picked, 1)
            out[name] = values.masked_fill(~mask.view(*mask.shape, *([1] * (values.dim() - 2))), 0.0)
        return out

    def _paths(self, rows: Tensor, last: Tensor, width: int) -> Tensor:
        """(R', T) row of every step on each caption's way to its last step, walked backwards
        through the reorders (rows past a caption's end: its row at the end, masked later)."""
        path = torch.empty(rows.shape[0], width, dtype=torch.long, device=rows.device)
        current = rows.clone()
        for s in range(width - 1, -1, -1):
            if s + 1 < width and self.sources[s + 1] is not None:  # last > s: come from step s + 1
                current = torch.where(last > s, self.sources[s + 1][current], current)
            current = torch.where(last == s, rows, current)
            path[:, s] = current
        return path
