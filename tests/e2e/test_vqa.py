"""`catcap vqa` end to end on a tiny world: pre-train a tiny VLP by masked-token prediction,
fine-tune it for VQA, score it against the per-type baseline, ask it; errors for the wrong kind
of checkpoint."""

import json
from pathlib import Path

import pytest

from catcap import api
from catcap.cli.main import main
from catcap.training.checkpoint import load_checkpoint

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def vlp_checkpoint(tiny_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("vlp")
    items = {"data.dataset": tiny_world.dataset, "data.features": tiny_world.features, "data.min_count": 1,
             "model.feature_dim": 32, "model.d_model": 32, "model.num_heads": 2, "model.encoder": "vlp_regions",
             "model.decoder": "vlp", "model.decoder_layers": 2, "model.d_ff": 64, "train.mlm.enabled": "true",
             "train.epochs": 1, "train.batch_size": 20, "train.progress": "false", "out_dir": out}
    assert main(["train", "--config", str(CONFIGS / "models" / "vlp_small.yaml"), *[f"{k}={v}" for k, v in items.items()]]) == 0
    return out / "best"


def test_fine_tune_evaluate_and_ask(vlp_checkpoint, tmp_path, capsys):
    assert main(["vqa", "train", "--checkpoint", str(vlp_checkpoint), "--out", str(tmp_path / "vqa"), "--epochs", "2",
                 "--batch-size", "32", "--lr", "1e-3", "--no-progress"]) == 0
    saved = load_checkpoint(tmp_path / "vqa" / "best")
    assert saved["config"]["vqa"]["checkpoint"] == str(vlp_checkpoint)
    answers = saved["vocab"]["answers"]["answers"]
    assert {"yes", "no"} <= set(answers)
    text = saved["vocab"]["text"]
    assert {"what", "how", "many"} <= set(text["tokens"])  # question words joined the caption vocabulary
    capsys.readouterr()
    assert main(["vqa", "evaluate", "--model", str(tmp_path / "vqa" / "best"), "--split", "val",
                 "--output", str(tmp_path / "val.json")]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "val.json").read_text())
    assert result["questions"] > 100 and set(result["per_type"]) == {"color", "count", "exists", "relation", "shape",
                                                                      "size"}
    assert 0.0 <= result["accuracy"] <= 1.0 and f"{result['accuracy']:.3f}" in printed
    # per type, the baseline answers with its type's most frequent training answer: exists/relation
    # are yes/no questions, so it scores about half of them
    assert 0.25 < result["baseline"]["per_type"]["exists"] < 0.75
    assert main(["vqa", "ask", "--model", str(tmp_path / "vqa" / "best"), "--image", "120", "--top", "2",
                 "is there a red circle?"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.split("\t")[0] in answers for line in lines)
    probs = [float(line.split("\t")[1]) for line in lines]
    assert probs[0] >= probs[1] and all(0 < p < 1 for p in probs)


def test_a_captioning_checkpoint_of_another_model_is_refused(tiny_world, tmp_path, capsys):
    items = {"data.dataset": tiny_world.dataset, "data.features": tiny_world.features, "data.min_count": 1,
             "model.feature_dim": 32, "model.d_model": 32, "model.num_heads": 2, "model.encoder_layers": 1,
             "model.decoder_layers": 1, "model.d_ff": 64, "train.max_steps": 2, "train.progress": "false",
             "out_dir": tmp_path / "tf"}
    assert main(["train", "--config", str(CONFIGS / "experiments" / "demo.yaml"), *[f"{k}={v}" for k, v in items.items()]]) == 0
    capsys.readouterr()
    assert main(["vqa", "train", "--checkpoint", str(tmp_path / "tf" / "last"), "--out", str(tmp_path / "vqa")]) == 2
    assert "VQA needs a VLP checkpoint (model.decoder=vlp), found model.decoder='transformer'" in capsys.readouterr().err
    assert main(["vqa", "evaluate", "--model", str(tmp_path / "tf" / "last")]) == 2
    assert "is a captioning checkpoint, not a VQA one" in capsys.readouterr().err


def test_the_log_has_one_line_per_epoch(vlp_checkpoint, tmp_path):
    assert main(["vqa", "train", "--checkpoint", str(vlp_checkpoint), "--out", str(tmp_path / "vqa"), "--epochs", "2",
                 "--batch-size", "64", "--no-progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "vqa" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2] and all(r["train_loss"] > 0 for r in rows)
    best = max(rows, key=lambda r: r["val"]["accuracy"])
    evaluated = api.vqa_evaluate(tmp_path / "vqa" / "best", "val")
    assert evaluated["accuracy"] == pytest.approx(best["val"]["accuracy"])  # best/ is the best epoch's weights
