"""catcap's small public API. The command line and other faces call only this module.

So far: evaluating caption files (``evaluate``) and comparing two systems (``compare``).
Training, captioning and generation arrive with the pipeline.
"""

from __future__ import annotations

import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

from catcap.metrics.bootstrap import Comparison, paired_bootstrap
from catcap.metrics.errors import MetricInputError
from catcap.metrics.evaluate import Evaluation, evaluate_captions
from catcap.metrics.files import load_references, load_results


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
    refs = load_references(references, split)  # validate both files before any work
    res = load_results(results)
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
    res_a, res_b = load_results(results_a), load_results(results_b)
    if set(res_a) != set(res_b):
        raise MetricInputError(
            f"{results_a} and {results_b} caption different images "
            f"({len(set(res_a) - set(res_b))} only in the first, {len(set(res_b) - set(res_a))} only in the second); "
            "a paired comparison needs both systems on the same images"
        )
    res_b = {k: res_b[k] for k in res_a}
    ev_a = evaluate_captions(res_a, refs, metrics, corenlp_dir=corenlp_dir, log=log)
    ev_b = evaluate_captions(res_b, refs, metrics, corenlp_dir=corenlp_dir, log=log)
    return paired_bootstrap(ev_a, ev_b, resamples=resamples, seed=seed)


def write_json_atomic(path: str | Path, data) -> None:
    """Write JSON to ``path`` via a temp file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_experiment(path: str | Path | None, overrides: Sequence[str] = ()):
    """The experiment config of a YAML file plus ``key=value`` overrides, fully checked."""
    from catcap.config import load_config
    from catcap.training.experiment import ExperimentConfig

    return load_config(ExperimentConfig, path, overrides)


def config_yaml(cfg) -> str:
    import yaml

    from catcap.config import to_dict

    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def train(config: str | Path | None, overrides: Sequence[str] = (), *, resume: bool = False, log=print):
    """Train the experiment; returns the final position (steps, best CIDEr-D)."""
    from catcap.training.loop import Trainer

    return Trainer(load_experiment(config, overrides), resume=resume, log=log).fit()


def synth(out_dir: str | Path, **kwargs):
    """Make the built-in shapes world (see ``catcap synth --help``)."""
    from catcap.data.synthetic import make_world

    return make_world(out_dir, **kwargs)


def demo(out_dir: str | Path = "runs/demo", **kwargs) -> dict:
    """The README's demo (see ``catcap demo --help``)."""
    from catcap.demo import run_demo

    return run_demo(out_dir, **kwargs)
