"""Validation: decode a split and score it with catcap.metrics.

In a distributed run every rank decodes its shard of the images (``images[rank::world]``); the
token ids are gathered on every rank and put back in dataset order, and every rank scores the
whole split (the same numbers everywhere, so that best-checkpoint and phase decisions agree).
An image decoded twice or never is an error, not a silently different score.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.utils.data import DataLoader, Subset

from catcap.data.collate import collate_images
from catcap.data.datasets import ImageDataset
from catcap.data.vocab import Vocab
from catcap.decoding import GenerationConfig, generate
from catcap.metrics.evaluate import Evaluation, evaluate_tokenized
from catcap.progress import progress_bar
from catcap.training.distributed import DistContext, gather_rows


@torch.no_grad()
def decode_tokens(model, dataset, device, batch_size: int, generation: GenerationConfig, progress: bool = False,
                  autocast=None, vocab: Vocab | None = None) -> list[torch.Tensor]:
    """Generated token ids (1-D, without ``<bos>``) of every item of ``dataset``, in order, decoded
    as ``generation`` says (one caption per image); ``autocast``: a context manager factory
    (reduced precision); ``vocab``: the caption rules of ``catcap evaluate`` apply (never
    ``<unk>``; :func:`~catcap.decoding.generate`), without it the model decodes unrestricted."""
    model.eval()
    # its own generator: a DataLoader draws a seed from the global RNG for every pass, which
    # would shift the training's dropout stream by one draw per validation
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_images,
                        generator=torch.Generator())
    rows: list[torch.Tensor] = []
    for batch in progress_bar(loader, desc="validate", unit="batch", enabled=progress, leave=False):
        batch = batch.to(device)
        with (autocast or nullcontext)():
            out = generate(model, batch.features, batch.feature_mask, generation, vocab=vocab)
        rows.extend(out.tokens.cpu())
    return rows


def decode_split(model, dataset: ImageDataset, vocab: Vocab, device, batch_size: int, generation: GenerationConfig,
                 progress: bool = False, ctx: DistContext | None = None,
                 autocast=None) -> tuple[list, list[list[str]], list[list[list[str]]]]:
    """Captions of every image: (image ids, candidate tokens, reference tokens), in dataset order,
    decoded as ``generation`` says with the rules of ``catcap evaluate`` (never ``<pad>``,
    ``<bos>``, ``<unk>``). With a distributed ``ctx``, each rank decodes its shard and the
    results are gathered."""
    ctx = ctx or DistContext()
    n = len(dataset)
    mine = list(range(ctx.rank, n, ctx.world))
    part = dataset if not ctx.enabled else Subset(dataset, mine)
    rows = decode_tokens(model, part, device, batch_size, generation, progress and ctx.is_main, autocast, vocab)
    tokens = _in_dataset_order(rows, mine, n, ctx, vocab.pad_id)
    ids = [r.image_id for r in dataset.records]
    refs = [[list(c) for c in r.captions] for r in dataset.records]
    return ids, [vocab.decode(t.tolist()) for t in tokens], refs


def _in_dataset_order(rows: list[torch.Tensor], mine: list[int], n: int, ctx: DistContext, pad: int) -> list[torch.Tensor]:
    """Gather every rank's rows and their dataset indices; check each index comes exactly once."""
    if not ctx.enabled:
        return rows
    width = max((len(r) for r in rows), default=0)
    local = torch.full((len(rows), max(width, 1)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        local[i, :len(r)] = r
    all_rows = torch.cat(gather_rows(local, ctx, pad), dim=0)
    all_index = torch.cat(gather_rows(torch.tensor(mine, dtype=torch.long)[:, None], ctx), dim=0)[:, 0].tolist()
    if sorted(all_index) != list(range(n)):
        raise RuntimeError(f"sharded validation covered {len(set(all_index))} distinct of {n} images "
                           f"({len(all_index)} decodes): every image must be decoded exactly once")
    ordered: list[torch.Tensor] = [torch.empty(0)] * n
    for i, row in zip(all_index, all_rows):
        ordered[i] = row
    return ordered


def validate(model, dataset: ImageDataset, vocab: Vocab, device, batch_size: int, generation: GenerationConfig,
             metrics=("bleu", "rouge", "cider"), progress: bool = False,
             ctx: DistContext | None = None, autocast=None) -> tuple[Evaluation, list[list[str]]]:
    """Decode as ``generation`` says and evaluate (Java-free metrics by default, so validation stays fast)."""
    ids, cands, refs = decode_split(model, dataset, vocab, device, batch_size, generation, progress, ctx, autocast)
    return evaluate_tokenized(ids, cands, refs, metrics), cands
