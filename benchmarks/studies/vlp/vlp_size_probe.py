"""Does a VLP model read object size? Masked-token probe of a VLP checkpoint (issue 20).

In every caption of a shapes-world split that has a size word (small, tiny, little / large, big),
the first size word is replaced by [MASK], the caption goes through the model with its image's
regions under the bidirectional mask, and the size family (small or large) whose best word scores
higher is the model's answer. Accuracy against the caption's own family, beside the accuracy of
always answering the more frequent family. A model that reads size from the regions scores well
above that baseline; one that only learned the captions' word statistics scores at it.
Usage: python benchmarks/studies/vlp/vlp_size_probe.py CHECKPOINT [CHECKPOINT ...] [--dataset D] [--split val]
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

from catcap.inference.captioner import Captioner
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.data.vocab import Vocab
from catcap.models.vlp import MASK_ID, VLPDecoder

FAMILIES = {"small": ("small", "tiny", "little"), "large": ("large", "big")}


def load_vlp(path: str) -> Captioner:
    """A VLP captioning / pre-training checkpoint, refused if it is another model."""
    captioner = Captioner.from_pretrained(path, device="cpu")
    if not isinstance(captioner.model.decoder, VLPDecoder):
        raise SystemExit(f"{path} is not a VLP model (model.decoder={captioner.config.model.decoder!r})")
    return captioner


def masked_size_word(tokens: list[str], vocab: Vocab, max_len: int):
    """-> (ids (1, T) with the first size word masked, its position, its family) or None."""
    family = {w: f for f, words in FAMILIES.items() for w in words}
    hit = next((i for i, w in enumerate(tokens[:max_len]) if w in family), None)
    if hit is None:
        return None
    ids = torch.tensor([vocab.encode(tokens, max_len, add_bos=False)])
    ids[0, hit] = MASK_ID
    return ids, hit, family[tokens[hit]]


@torch.no_grad()
def probe(path: str, dataset: str | None, split: str, limit: int) -> dict:
    captioner = load_vlp(path)
    model, vocab = captioner.model, captioner.vocab
    store = captioner.reading(open_feature_store(captioner.data_file("features")))
    word_ids = {f: [vocab.tokens.index(w) for w in words if w in vocab.tokens] for f, words in FAMILIES.items()}
    outcomes = Counter()
    for rec in load_karpathy(dataset or captioner.data_file("dataset"), [split])[split][:limit]:
        regions = torch.as_tensor(store.get(rec.key).regions)[None]
        region_mask = torch.ones(regions.shape[:2], dtype=torch.bool)
        memory = model.encoder(regions, region_mask)
        for tokens in rec.captions:
            found = masked_size_word(tokens, vocab, 30)
            if found is None:
                continue
            ids, pos, truth = found
            logits = model.decoder.masked_lm(memory, region_mask, ids, ids != vocab.pad_id, "bidirectional")[0, pos]
            guess = max(word_ids, key=lambda f: float(logits[word_ids[f]].max()))
            outcomes[(truth, guess)] += 1
    total = sum(outcomes.values())
    truths = Counter(t for (t, _), n in outcomes.items() for _ in range(n))
    return {"captions": total, "accuracy": sum(n for (t, g), n in outcomes.items() if t == g) / total,
            "majority": max(truths.values()) / total, "outcomes": {f"{t}->{g}": n for (t, g), n in sorted(outcomes.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--dataset", help="split file (default: the checkpoint's)")
    parser.add_argument("--split", default="val")
    parser.add_argument("--images", type=int, default=500, help="first N images of the split")
    args = parser.parse_args()
    for path in args.checkpoints:
        r = probe(path, args.dataset, args.split, args.images)
        print(f"{path}: size-word accuracy {r['accuracy']:.3f} over {r['captions']} captions "
              f"(more frequent family {r['majority']:.3f}); {r['outcomes']}")


if __name__ == "__main__":
    main()
