"""Validation: decode a split and score it with catcap.metrics."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from catcap.data.collate import collate_images
from catcap.data.datasets import ImageDataset
from catcap.data.vocab import Vocab
from catcap.decoding import beam_search, greedy
from catcap.metrics.evaluate import Evaluation, evaluate_tokenized


@torch.no_grad()
def decode_split(model, dataset: ImageDataset, vocab: Vocab, device, batch_size: int, max_len: int,
                 progress: bool = False, beam: int = 1) -> tuple[list, list[list[str]], list[list[list[str]]]]:
    """Captions of every image, greedy (beam 1) or by beam search: (image ids, candidate
    tokens, reference tokens)."""
    model.eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_images)
    ids, cands, refs = [], [], []
    for batch in tqdm(loader, desc="validate", unit="batch", disable=not progress, leave=False):
        batch = batch.to(device)
        if beam > 1:
            out = beam_search(model, batch.features, batch.feature_mask, beam_size=beam, max_len=max_len)
        else:
            out = greedy(model, batch.features, batch.feature_mask, max_len=max_len)
        ids.extend(batch.image_ids)
        cands.extend(vocab.decode(row.tolist()) for row in out.tokens.cpu())
        refs.extend(batch.references)
    return ids, cands, refs


def validate(model, dataset: ImageDataset, vocab: Vocab, device, batch_size: int, max_len: int,
             metrics=("bleu", "rouge", "cider"), progress: bool = False, beam: int = 1) -> tuple[Evaluation, list[list[str]]]:
    """Decode and evaluate (Java-free metrics by default, so validation stays fast)."""
    ids, cands, refs = decode_split(model, dataset, vocab, device, batch_size, max_len, progress, beam)
    return evaluate_tokenized(ids, cands, refs, metrics), cands
