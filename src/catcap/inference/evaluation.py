"""Caption a split with a trained checkpoint and score it (``catcap evaluate --checkpoint``,
``catcap ablate``). A module of its own so that the ablation runner and the public API
(:mod:`catcap.api`, which re-exports :func:`evaluate_checkpoint`) both depend on it, not on
each other."""

from __future__ import annotations

import json
from pathlib import Path

from typing import TYPE_CHECKING

from catcap.atomic import write_json_atomic
from catcap.metrics.evaluate import evaluate_captions

if TYPE_CHECKING:  # imported where used: scoring a result file (catcap.api) never loads torch
    from catcap.decoding.config import GenerationConfig


def _decode_records(captioner, records, stores, config: GenerationConfig, *, batch_size: int = 50,
                    progress: bool = True, precision: str = "fp32") -> list[dict]:
    """COCO-format results for ``records``: [{"image_id", "caption"}] (a progress bar with rate
    and ETA, in images). ``stores``: one feature store per member of ``captioner`` (a
    :class:`Captioner` has one, an :class:`~catcap.inference.ensemble.Ensemble` one each);
    ``precision`` bf16/fp16: decoding under that autocast."""
    import torch

    from catcap.data.collate import pad_regions
    from catcap.progress import progress_bar
    from catcap.training.precision import Precision

    results = []
    bar = progress_bar(total=len(records), desc=f"caption ({config.describe()})", unit="img", enabled=progress)
    with Precision(precision, captioner.device).autocast():
        for i in range(0, len(records), batch_size):
            chunk = records[i:i + batch_size]
            inputs = []
            for store in stores:
                feats, mask, _ = pad_regions([torch.from_numpy(store.get(r.key).regions) for r in chunk],
                                             [None] * len(chunk))
                inputs.append((feats, mask))
            texts = captioner.generate(*inputs[0], config=config) if len(inputs) == 1 \
                else captioner.generate(member_features=inputs, config=config)
            results += [{"image_id": r.image_id, "caption": t} for r, t in zip(chunk, texts)]
            bar.update(len(chunk))
    bar.close()
    return results


def evaluate_checkpoint(checkpoint, *, split: str = "test", generation: GenerationConfig | None = None,
                        metrics=None, dataset: str | None = None, features: str | None = None,
                        save_results: str | Path | None = None, corenlp_dir: str | None = None, log=None,
                        device: str = "auto", progress: bool = True, shard=None, dtype=None,
                        precision: str = "fp32", combine: str = "mean_log_prob", images: str | Path | None = None):
    """Caption a split with a trained model and score it like a COCO result file.

    ``checkpoint``: a checkpoint or zoo folder (or name), or a list of them: an
    :class:`~catcap.inference.ensemble.Ensemble` of those models, each reading its own
    checkpoint's feature store (``features`` replaces every member's), combined as ``combine``
    says (:mod:`catcap.decoding.ensemble`). ``generation``: how the
    captions are decoded (default :class:`~catcap.decoding.GenerationConfig`: beam 3, at most 20
    words). Returns (Evaluation, results); ``save_results`` writes the COCO-format results;
    ``device``: auto | cpu | cuda. ``dtype`` (fp32 | bf16 | fp16, default fp32): the weights'
    dtype while decoding (:meth:`Captioner.from_pretrained`; bf16 is the fast one on CPUs with
    bf16 instructions, docs/distributed.md). ``precision`` (fp32 | bf16 | fp16): decoding under
    that autocast, the weights kept as they are (as ``catcap train --precision`` validates).
    ``shard`` (a :class:`~catcap.sharding.Shard` or ``"I/N"``;
    None: the whole split; the CLI passes torchrun's rank, :func:`~catcap.sharding.resolve_shard`) captions one contiguous block of the split into the part
    :func:`~catcap.sharding.part_path` of ``save_results`` (then required). Scores need every
    caption: under torchrun rank 0 merges the parts into ``save_results`` and scores them (the
    other ranks return ``(None, their results)``); with ``--shard`` every shard returns
    ``(None, results)`` and the parts are joined by ``catcap merge`` and scored by
    ``catcap evaluate --results``. ``images`` (a folder of the split's photos, for a model that
    reads them): caption from those photos, run through the checkpoint's own image encoder into
    a store in catcap's cache (:mod:`catcap.inference.photo_features`), instead of ``features``.
    """
    from catcap.data.datasets import validate_dataset
    from catcap.data.features import open_feature_store
    from catcap.data.karpathy import load_karpathy
    from catcap.decoding.config import GenerationConfig
    from catcap.inference.ensemble import load_captioner
    from catcap.inference.photo_features import feature_store
    from catcap.sharding import Shard, parse_shard, part_path

    config = generation or GenerationConfig()
    which = shard if isinstance(shard, Shard) else parse_shard(shard) if shard else Shard()
    if images and not which.whole:
        raise ValueError(f"--images with shard {which}: the shards would extract the same photos at once; extract "
                         "them first (catcap extract, or one unsharded catcap evaluate --images), then shard with "
                         "--features")
    if not which.whole and not save_results:
        raise ValueError(f"a sharded evaluation (shard {which}) needs --save-results RESULTS.json: each shard "
                         "writes its part of the captions there, and the scores come from the merged file")
    cap = load_captioner(checkpoint, device=device, dtype=dtype, combine=combine)
    whose = "" if dataset else " (the checkpoint's data.dataset)"
    dataset = dataset or cap.members[0].data_file("dataset")
    if not Path(dataset).exists():
        raise FileNotFoundError(f"reference file {dataset}{whose} does not exist; pass --refs REFS.json, the Karpathy "
                                "split file of the photos (catcap import makes one: docs/datasets.md; docs/zoo.md has "
                                "the commands for the bundled models)")
    member_stores = [feature_store(member, dataset, split, features=features, images=images, progress=progress, log=log)
                     for member in cap.members]
    records = load_karpathy(dataset, [split])[split]
    mine = which.take(records)
    stores = []
    for member, path in zip(cap.members, member_stores):
        store = member.reading(open_feature_store(path))
        validate_dataset(mine, store, member.config.model.input_dim)
        stores.append(store)
    results = _decode_records(cap, mine, stores, config, progress=progress, precision=precision)
    if save_results:
        write_json_atomic(part_path(save_results, which), results)
    if not which.whole:
        if not _merged(save_results, which, dataset, split, log):
            return None, results
        results = json.loads(Path(save_results).read_text(encoding="utf-8"))
    refs = {r.image_id: r.raw for r in records}
    ev = evaluate_captions({r["image_id"]: r["caption"] for r in results}, refs, metrics, corenlp_dir=corenlp_dir, log=log)
    return ev, results


def _merged(save_results, shard, dataset, split: str, log) -> bool:
    """After a shard's part is written: True on the rank that merged every part (rank 0 under
    torchrun); else False, after saying how the parts are joined and scored."""
    from catcap.merge import finish_sharded
    from catcap.sharding import torchrun_shard

    if finish_sharded(save_results, shard, log=log) is not None:
        return True
    if log and torchrun_shard() is None:
        log(f"then score them: catcap evaluate --results {save_results} --refs {dataset} --split {split}")
    return False
