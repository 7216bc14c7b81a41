"""``catcap ablate --table N``: rerun one of the paper's ablation tables with one command.

Each row of table N is a config ``configs/ablations/tableN_<k>_<row>.yaml`` (its ``name`` is
the row label). Every row's config is loaded and checked first; then each row is trained (or
resumed: an interrupted ablation continues where it stopped, a finished row is not retrained),
its best checkpoint captions the evaluation split with beam search, and the table is printed
next to the paper's CIDEr-D and written as Markdown and JSON. Overrides apply to every row
(e.g. the data paths, or a smaller model for a quick look).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from catcap.atomic import write_json_atomic, write_text_atomic
from catcap.config import load_config
from catcap.training.experiment import ExperimentConfig

ABLATIONS_DIR = Path(__file__).resolve().parents[2] / "configs" / "ablations"
METRICS = ("bleu", "meteor", "rouge", "cider")
COLUMNS = ("Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")
# The paper's CIDEr-D (x100) on the COCO Karpathy test split for each row (SPEC.md §6).
PAPER_CIDER = {
    "table2_1_att2in": 111.4, "table2_2_att2in_caca": 119.7, "table2_3_updown": 120.1, "table2_4_updown_caca": 126.4,
    "table2_5_lookback": 124.4, "table2_6_lookback_caca": 128.1,
    "table5_1_tca": 126.5, "table5_2_ohc": 126.8, "table5_3_ihc": 128.2, "table5_4_chc": 128.9,
    "table7_1_none": 128.9, "table7_2_beta_0.1": 127.8, "table7_3_beta_0.3": 128.7, "table7_4_beta_0.5": 129.3,
    "table7_5_beta_0.7": 128.4, "table7_6_beta_0.9": 127.2, "table7_7_adaptive": 129.6,
}


def table_configs(table: str) -> list[Path]:
    """The row configs of table ``table``, in row order."""
    paths = sorted(ABLATIONS_DIR.glob(f"table{table}_*.yaml"))
    if not paths:
        tables = sorted({p.name.split("_")[0][len("table"):] for p in ABLATIONS_DIR.glob("table*_*.yaml")})
        raise ValueError(f"no ablation configs for table {table!r} in {ABLATIONS_DIR}; choose one of: {', '.join(tables)}")
    return paths


def plan(table: str, overrides: Sequence[str] = (), out_root: str | Path | None = None) -> dict[str, ExperimentConfig]:
    """{row config stem: its experiment config}, all loaded and checked before anything runs."""
    root = Path(out_root or f"runs/ablations/table{table}")
    return {p.stem: load_config(ExperimentConfig, p, [*overrides, f"out_dir={root / p.stem}"]) for p in table_configs(table)}


def run_ablation(table: str, overrides: Sequence[str] = (), *, out_root: str | Path | None = None, split: str = "test",
                 beam: int = 5, log=print) -> list[dict]:
    """Train and evaluate every row of table ``table``; returns the rows (label, metrics, paper)."""
    from catcap.training.loop import Trainer
    from catcap.viz.training_curves import plot_if_logged

    root = Path(out_root or f"runs/ablations/table{table}")
    configs = plan(table, overrides, root)
    rows = []
    for i, (stem, cfg) in enumerate(configs.items()):
        log(f"[catcap] table {table}, row {i + 1}/{len(configs)}: {cfg.name} -> {cfg.out_dir}")
        Trainer(cfg, resume=True, log=log).fit()
        plot_if_logged(cfg.out_dir)  # <row out_dir>/training.png, as `catcap train` draws it
        chosen = Path(cfg.out_dir) / "best"
        if not (chosen / "model.safetensors").exists():  # stopped by train.max_steps before any validation
            chosen = Path(cfg.out_dir) / "last"
            log(f"[catcap] {cfg.name}: no validated checkpoint (train.max_steps hit mid-epoch); evaluating {chosen}")
        rows.append({"row": stem, "label": cfg.name, "metrics": _scores(chosen, split, beam, log),
                     "paper_cider": PAPER_CIDER.get(stem)})
    text = format_table(table, rows, split, beam)
    print(text)
    root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(root / "table.md", text + "\n")
    write_json_atomic(root / "table.json", {"table": table, "split": split, "beam": beam, "rows": rows})
    log(f"[catcap] wrote {root / 'table.md'} and {root / 'table.json'}")
    return rows


def _scores(checkpoint: Path, split: str, beam: int, log) -> dict:
    """Corpus metrics of ``checkpoint`` on ``split``; reused from ``<run>/ablation_eval.json``
    when that checkpoint was already scored with the same split and beam, on the same data
    files (path, size and modification time of the dataset and feature files it reads)."""
    from catcap.inference.captioner import Captioner
    from catcap.inference.evaluation import evaluate_checkpoint

    cap = Captioner.from_pretrained(checkpoint, device="cpu")
    key = {"checkpoint": str(checkpoint), "weights_mtime_ns": (checkpoint / "model.safetensors").stat().st_mtime_ns,
           "split": split, "beam": beam, "metrics": list(METRICS),
           "data": {name: _stamp(cap.data_file(name)) for name in ("dataset", "features")}}
    cache = checkpoint.parent / "ablation_eval.json"
    if cache.exists():
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            log(f"[catcap] reusing the scores in {cache}")
            return saved["scores"]
    from catcap.decoding import build_generation_config

    generation = build_generation_config({"num_beams": beam}, names={"num_beams": "--beam"})
    ev, _ = evaluate_checkpoint(checkpoint, split=split, generation=generation, metrics=METRICS)
    write_json_atomic(cache, {"key": key, "scores": ev.corpus})
    return ev.corpus


def _stamp(path: str) -> list | None:
    """[absolute path, size, mtime_ns] of a data file (or feature folder); None when missing."""
    p = Path(path)
    if not p.exists():
        return None
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def format_table(table: str, rows: list[dict], split: str, beam: int) -> str:
    """A Markdown table: one row per config, metrics x100 like the paper, then the paper's CIDEr-D."""
    head = f"Table {table} ({split} split, beam {beam}; metrics x100)\n\n"
    head += "| row | " + " | ".join(COLUMNS) + " | paper CIDEr-D |\n|---|" + "---|" * (len(COLUMNS) + 1)
    lines = []
    for r in rows:
        cells = [f"{100 * r['metrics'][c]:.1f}" if c in r["metrics"] else "n/a" for c in COLUMNS]
        paper = f"{r['paper_cider']:.1f}" if r["paper_cider"] is not None else "-"
        lines.append(f"| {r['label']} | " + " | ".join(cells) + f" | {paper} |")
    return head + "\n" + "\n".join(lines)
