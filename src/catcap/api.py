"""catcap's small public API. The command line and other faces call only this module.

So far: evaluating caption files (``evaluate``) and comparing two systems (``compare``).
Training, captioning and generation arrive with the pipeline.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

from catcap.atomic import write_json_atomic  # noqa: F401  (api.write_json_atomic, used by the CLI)
from catcap.metrics.bootstrap import Comparison, paired_bootstrap
from catcap.metrics.evaluate import Evaluation, evaluate_captions
from catcap.metrics.files import load_references, load_result_pair, load_results
from catcap.inference.evaluation import evaluate_checkpoint  # noqa: F401  (api.evaluate_checkpoint)


def example_files() -> tuple[Path, Path]:
    """The bundled example: (results.json, references.json) for 50 COCO val2014 images."""
    root = resources.files("catcap") / "examples"
    return Path(str(root / "coco_val_results.json")), Path(str(root / "coco_val_references.json"))


def evaluate(
    results: str | Path,
    references: str | Path,
    *,
    split: str | None = None,
    metrics: str | Sequence[str] | None = None,
    corenlp_dir: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Evaluation:
    """Score a COCO result file against COCO annotations or a Karpathy split file."""
    from catcap.metrics.refs_cache import load_wanted_references

    res = load_results(results, references)  # validate both files before any work
    refs = load_wanted_references(references, split, list(res))
    return evaluate_captions(res, refs, metrics, corenlp_dir=corenlp_dir, log=log)


def compare(
    results_a: str | Path,
    results_b: str | Path,
    references: str | Path,
    *,
    split: str | None = None,
    metrics: str | Sequence[str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
    corenlp_dir: str | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Comparison]:
    """Paired bootstrap comparison of two result files on the same images."""
    refs = load_references(references, split)
    res_a, res_b = load_result_pair(results_a, results_b, "a paired comparison", references)
    ev_a = evaluate_captions(res_a, refs, metrics, corenlp_dir=corenlp_dir, log=log)
    ev_b = evaluate_captions(res_b, refs, metrics, corenlp_dir=corenlp_dir, log=log)
    return paired_bootstrap(ev_a, ev_b, resamples=resamples, seed=seed)


def load_experiment(path: str | Path | None, overrides: Sequence[str] = ()):
    """The experiment config of a YAML file plus ``key=value`` overrides, fully checked."""
    from catcap.config import load_config
    from catcap.training.experiment import ExperimentConfig

    return load_config(ExperimentConfig, path, overrides)


def check_experiment_data(cfg) -> list[str]:
    """What ``catcap train`` reads before its first step, checked without training (raises on
    the first problem, with the same message train would give); returns one line per check."""
    from catcap.training.checkpoint import load_checkpoint
    from catcap.training.setup import prepare_data

    lines = []
    vocab = None
    if not cfg.data.dataset or not cfg.data.features:
        return ["data not checked: data.dataset and data.features are not both set (catcap train needs them: "
                "a Karpathy JSON and a feature store)"]
    if cfg.train.init_from:
        from catcap.data.vocab import Vocab
        from catcap.training.starting import load_start_weights
        from catcap.training.setup import make_model

        start = load_checkpoint(cfg.train.init_from)
        vocab = Vocab.from_dict(start["vocab"])
        load_start_weights(make_model(cfg, vocab), start, cfg, cfg.train.init_from)
        lines.append(f"init_from OK: {cfg.train.init_from} fits the configured model")
    data = prepare_data(cfg, vocab)
    d = cfg.data
    lines.append(f"data OK: {len(data.train)} training captions ({d.train_split}), {len(data.val)} {d.val_split} "
                 f"images, {data.store.feature_dim}-d features in {d.features}, vocabulary {len(data.vocab)} words")
    return lines


def config_yaml(cfg) -> str:
    import yaml

    from catcap.config import to_dict

    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def train(config: str | Path | None, overrides: Sequence[str] = (), *, resume: bool = False, log=print):
    """Train the experiment; returns the final position (steps, best CIDEr-D)."""
    import gc

    from catcap.training.loop import Trainer

    from catcap.training.distributed import teardown

    trainer = Trainer(load_experiment(config, overrides), resume=resume, log=log)
    ctx = trainer.dist
    try:
        result = trainer.fit()
    except BaseException:
        teardown(ctx, wait=False)
        raise
    del trainer  # the DDP wrapper holds the process group: free it before the group is destroyed
    gc.collect()
    teardown(ctx)
    return result


def plot_training(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """``run_dir/training.png``: losses, validation CIDEr-D and the SCST signals per step."""
    from catcap.viz.training_curves import plot_training_log

    return plot_training_log(run_dir, out)


def synth(out_dir: str | Path, **kwargs):
    """Make the built-in shapes world (see ``catcap synth --help``)."""
    from catcap.data.synthetic import make_world

    return make_world(out_dir, **kwargs)


def demo(out_dir: str | Path = "runs/demo", **kwargs) -> dict:
    """The README's demo (see ``catcap demo --help``)."""
    from catcap.demo import run_demo

    return run_demo(out_dir, **kwargs)


def ablate(table: str, overrides: Sequence[str] = (), **kwargs) -> list[dict]:
    """Rerun ablation table ``table`` of the paper (see ``catcap ablate --help``)."""
    from catcap.ablation import run_ablation

    return run_ablation(table, overrides, **kwargs)


def analyze_history(checkpoints, out_dir, **kwargs):
    """Plots and numbers of how CAT models use their history memory (``catcap analyze history``)."""
    from catcap.viz.report import analyze_history as run

    return run(checkpoints, out_dir, **kwargs)


def caption(checkpoint, items: Sequence[str], *, features: str | None = None, generation=None,
            device: str = "auto", zoo: str | Path | None = None, **settings) -> list[tuple[str, str]]:
    """Captions for images. ``checkpoint``: a checkpoint folder, a zoo folder or name, a Hugging
    Face Hub id (``Captioner.from_pretrained``), a list of them (an ``Ensemble``), or None for
    the bundled model (:func:`bundled_model`; ``zoo``: another zoo folder). A model trained on
    `catcap extract` features captions image files from their pixels (the checkpoint records
    the encoder); otherwise items are keys of a feature store or image paths whose stem is the
    key (e.g. ``runs/demo/world/images/12.png``). A folder stands for its image files (sorted by
    name). An item that names an image file (a path or an image suffix) that does not exist, or
    a folder without images, is an error before anything runs; an image that cannot be read is
    an error too (:func:`caption_stream` reports it and goes on). ``generation`` (a
    ``catcap.decoding.GenerationConfig``) and/or its settings as keywords (``num_beams=5``,
    ``max_length=16``, ...): how captions are decoded (default beam 3, at most 20 words).
    Returns [(item, caption)]."""
    job = prepare_caption(checkpoint, items, features=features, generation=generation, device=device, zoo=zoo,
                          **settings)
    try:
        out = []
        for c in caption_stream(job, progress=False):
            if c.error is not None:
                raise ValueError(f"cannot read image {c.image}: {c.error}")
            out.append((c.image, c.caption))
        return out
    finally:
        job.close()


def prepare_caption(checkpoint, items: Sequence[str], *, features: str | None = None, generation=None,
                    device: str = "auto", zoo: str | Path | None = None, shard=None,
                    refs: str | Path | None = None, **settings):
    """The captioner loaded and ``items`` checked, ready to caption (a ``catcap.inference.caption_run.
    CaptionJob``; arguments as :func:`caption`); ``shard`` (a ``catcap.sharding.Shard``) keeps
    its block of the expanded items; ``refs``: a reference file whose file names give each
    photo's ``image_id`` in the results (else the file name's id: :mod:`catcap.metrics.result_ids`)."""
    from catcap.decoding import build_generation_config
    from catcap.inference.caption_run import prepare

    take = None if shard is None or shard.whole else shard.take
    return prepare(checkpoint, items, features=features, generation=build_generation_config(settings, generation),
                   device=device, zoo=zoo, take=take, refs=refs)


def caption_stream(job, *, progress: bool = True, batch_size: int = 16, workers: int = 2, pipelined: bool = True,
                   threads: int | None = None):
    """Each item's ``catcap.inference.pipeline.Caption`` (image, caption or None, error) in input order, as
    the pipeline finishes each batch (reading, encoding and decoding overlap: docs/pipeline.md)."""
    from catcap.inference.caption_run import caption_stream as run

    return run(job, progress=progress, batch_size=batch_size, workers=workers, pipelined=pipelined, threads=threads)


def caption_to_file(job, out: str | Path, *, restart: bool = False, batch_size: int = 16, workers: int = 2,
                    progress: bool = True, log=None):
    """Write ``job``'s captions to the JSON Lines file ``out``, incrementally and resumable
    (``catcap.inference.caption_file``); returns a ``catcap.inference.caption_run.FileResult``."""
    from catcap.inference.caption_run import caption_to_file as run

    return run(job, out, restart=restart, batch_size=batch_size, workers=workers, progress=progress,
               log=log or (lambda _: None))


def expand_image_folders(items: Sequence[str]) -> list[str]:
    """Each folder among ``items`` replaced by its image files (sorted by name; not recursive)."""
    from catcap.inference.caption_run import expand_image_folders as expand

    return expand(items)


def bundled_model(zoo: str | Path | None = None):
    """The zoo model ``catcap caption`` uses without ``--checkpoint`` (a ``catcap.zoo.ZooEntry``:
    name, path, size, scores); a ZooError saying how to get one when none is bundled."""
    from catcap import zoo as model_zoo

    return model_zoo.default_model(zoo)


def zoo_build(name: str, checkpoint: str | Path, *, record_captions: str | Path | None = None, **kwargs) -> Path:
    """``catcap zoo build``: write ``<zoo>/<name>`` from a checkpoint (``catcap.zoo.build``; kwargs:
    scores, recipe, eval_command, commit, training_time, limits, root, max_mb), then, with
    ``record_captions``, record the new model's captions in that JSON (:func:`record_captions_file`)."""
    from catcap import zoo as model_zoo

    if record_captions is not None:  # a wrong file or missing photos are refused before anything is built
        _expected_photos(_read_expected_captions(record_captions))
    folder = model_zoo.build(name, checkpoint, **kwargs)
    if record_captions is not None:
        record_captions_file(folder, record_captions)
    return folder


def _read_expected_captions(path: str | Path) -> dict:
    """An expected-captions JSON (see :func:`record_captions_file`), checked; ValueError naming it."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not readable JSON ({err}); expected {{\"photos_dir\": ..., \"decoding\": {{...}}, "
                         "\"captions\": {\"photo.jpg\": null, ...}} (tests/zoo/flickr8k_cat_captions.json)") from None
    if not isinstance(data, dict) or not isinstance(data.get("captions"), dict) or not data["captions"] \
            or not isinstance(data.get("photos_dir"), str) or not isinstance(data.get("decoding", {}), dict):
        raise ValueError(f"{path}: expected {{\"photos_dir\": ..., \"decoding\": {{...}}, \"captions\": "
                         "{\"photo.jpg\": null, ...}} (tests/zoo/flickr8k_cat_captions.json)")
    return data


def _expected_photos(data: dict) -> list[Path]:
    """The photo files an expected-captions JSON lists (``photos_dir`` is relative to the
    repository unless absolute); FileNotFoundError naming those that are missing."""
    from catcap.zoo import REPO

    photos = Path(data["photos_dir"])
    photos = photos if photos.is_absolute() else REPO / photos
    missing = [n for n in data["captions"] if not (photos / n).is_file()]
    if missing:
        raise FileNotFoundError(f"photos to caption not found in {photos}: {', '.join(missing)}")
    return [photos / n for n in data["captions"]]


def record_captions_file(model: str | Path, path: str | Path, *, zoo: str | Path | None = None) -> dict:
    """Fill an expected-captions JSON (``tests/zoo/flickr8k_cat_captions.json``) with ``model``'s
    captions of the photos it lists: {"photos_dir": relative to the repository or absolute,
    "decoding": generate() arguments, "captions": {photo file name: caption or null}}; the
    model's sha256 is recorded next to them. Returns the written data."""
    from catcap import zoo as model_zoo
    from catcap.inference.captioner import Captioner

    data = _read_expected_captions(path)
    photos = _expected_photos(data)
    names = list(data["captions"])
    cap = Captioner.from_pretrained(model, device="cpu", zoo=zoo)
    texts = cap.generate(images=[str(p) for p in photos], **data.get("decoding", {}))
    folder = model_zoo.locate(model, zoo)
    zoo_folder = model_zoo.is_zoo_folder(folder)
    data["sha256"] = model_zoo.read_card(folder)["sha256"]["model.safetensors"] if zoo_folder else None
    data["captions"] = dict(zip(names, texts))
    write_json_atomic(path, data)
    return data


def import_flickr8k(tokens: str | Path, split_lists: dict, out: str | Path, *, images: str | Path | None = None,
                    unsplit: str | None = None) -> dict:
    """Flickr8k caption file + split lists -> a Karpathy-format JSON at ``out``; returns the
    import report (splits, captions, warnings) that is also stored in the file."""
    from catcap.data.importers import import_flickr8k as _import, write_dataset_json

    data = _import(tokens, split_lists, images, unsplit=unsplit)
    write_dataset_json(out, data)
    return data["catcap_import"]


def import_coco(captions: Sequence[str | Path], out: str | Path, *, split_lists: dict | None = None,
                unlisted_split: str | None = "train") -> dict:
    """COCO caption JSON files (+ split lists) -> a Karpathy-format JSON at ``out``; returns the report."""
    from catcap.data.importers import import_coco as _import, write_dataset_json

    data = _import(captions, split_lists, unlisted_split=unlisted_split)
    write_dataset_json(out, data)
    return data["catcap_import"]


def import_features(fmt: str, source, out: str | Path, *, boxes_dir=None, progress: bool = True,
                    overwrite: bool = False) -> dict:
    """Region features in another codebase's format (tsv, npy, m2, lmdb) -> a catcap HDF5 store
    (an interrupted import is continued; ``overwrite`` replaces ``out`` instead)."""
    from catcap.data.feature_import import import_features as run

    return run(fmt, source, out, boxes_dir=boxes_dir, progress=progress, overwrite=overwrite)


def prepare(dataset: str | Path, out_dir: str | Path, *, min_count: int = 5, max_len: int = 16,
            train_split: str = "train") -> dict:
    """Vocabulary, encoded training captions, CIDEr-D df and a summary for a Karpathy JSON
    (:func:`catcap.data.prepare.prepare_dataset`); returns the summary."""
    from catcap.data.prepare import prepare_dataset

    return prepare_dataset(dataset, out_dir, min_count=min_count, max_len=max_len, train_split=train_split)


def extract(images, out: str | Path, *, encoder: str = "efficientnet-lite0", backend: str = "torch",
            dataset: str | Path | None = None, batch_size: int = 32,
            workers: int = 2, limit: int | None = None, restart: bool = False, progress: bool = True,
            shard: str | None = None, keep_parts: bool = False, log=None):
    """Image features (EfficientNet-Lite grid) of a folder or list of images into the HDF5 store
    ``out``; continues an existing ``out`` unless ``restart``. ``backend``: ``torch`` or ``onnx``
    (ONNX Runtime). With ``dataset`` (a Karpathy-format JSON), ``images`` is the folder of its
    files: exactly the dataset's images are extracted, keyed by image id as ``catcap train``
    expects. ``shard`` ``"I/N"`` (else torchrun's rank, else the whole job; :mod:`catcap.sharding`)
    extracts one block into a part of ``out``; under torchrun rank 0 then merges the parts
    (:func:`catcap.merge.finish_sharded`, removing them unless ``keep_parts``). Returns an
    ``ExtractResult`` (``out``: the part a shard wrote; ``merged``: the MergeResult on rank 0)."""
    from catcap.features.extract import dataset_images, extract_features
    from catcap.merge import finish_sharded
    from catcap.sharding import resolve_shard

    which = resolve_shard(shard)
    keys = None
    if dataset is not None:
        images, keys = dataset_images(dataset, images)
    res = extract_features(images, out, encoder, backend=backend, keys=keys, batch_size=batch_size, workers=workers,
                           resume=not restart, overwrite=restart, limit=limit, progress=progress, shard=which,
                           log=log)
    res.merged = finish_sharded(out, which, replace=restart, keep_parts=keep_parts, log=log)
    return res


def vqa_train(cfg, log=print):
    """Fine-tune a VLP checkpoint for VQA (``catcap.training.vqa.VQAConfig``); -> the best checkpoint."""
    from catcap.training.vqa import train_vqa

    return train_vqa(cfg, log)


def vqa_evaluate(directory, split: str = "test", **kwargs) -> dict:
    """VQA accuracy of a checkpoint on ``split``, overall and per question type, with the baseline."""
    from catcap.training.vqa import evaluate_vqa

    return evaluate_vqa(directory, split, **kwargs)


def vqa_ask(directory, image: str, question: str, **kwargs) -> list:
    """The top answers (answer, probability) to a question about an image: a photo file (through
    the image encoder that made the model's training features) or a feature-store key."""
    import torch

    from catcap.inference.captioner import images_to_features, pixel_encoder
    from catcap.training.vqa import ask

    if Path(image).is_file():
        cpu = torch.device("cpu")
        def photo_features(meta, model_cfg):
            return images_to_features(pixel_encoder(meta, cpu), [image], cpu, model_cfg)[0]

        return ask(directory, question, photo_features=photo_features, **kwargs)
    return ask(directory, question, image=image, **kwargs)
