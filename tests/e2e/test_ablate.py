"""`catcap ablate`: every row of a paper table trained, evaluated and tabulated in one command.

Oracles: the table configs' differences are listed by hand from the paper's tables; each row
of the tiny run's table is compared with its own checkpoint scored again by
``evaluate_checkpoint``, and the Markdown with the JSON; the paper's column is SPEC.md's."""

import json
import os
import subprocess
import sys

import pytest

from catcap.ablation import plan


def test_every_table_config_loads_and_differs_only_where_the_table_says():
    rows = {t: plan(t, out_root="/tmp/x") for t in ("5", "6", "7")}
    t5 = rows["5"]
    assert [c.name for c in t5.values()] == ["TCA", "+OHC", "+IHC", "+CHC"]
    assert [c.model.cross_attention for c in t5.values()] == ["vanilla", "caca", "caca", "caca"]
    assert [c.model.history.strategy for c in t5.values()] == ["chc", "ohc", "ihc", "chc"]
    assert not any(c.train.awc.enabled for c in t5.values())
    t7 = list(rows["7"].values())
    assert [(c.train.awc.enabled, c.train.awc.mode, c.train.awc.beta) for c in t7] == [
        (False, "adaptive", 0.5), (True, "fixed", 0.1), (True, "fixed", 0.3), (True, "fixed", 0.5),
        (True, "fixed", 0.7), (True, "fixed", 0.9), (True, "adaptive", 0.5)]
    assert [c.model.history.shared for c in rows["6"].values()][:2] == [True, False]
    for table in rows.values():  # same data, sizes and schedule in every row: the paper's Transformer on COCO
        sizes = {(c.model.d_model, c.model.encoder_layers, c.data.dataset, c.train.schedule.warmup) for c in table.values()}
        assert sizes == {(512, 3, "data/coco/dataset_coco.json", 10000)}


def test_table2_rows_are_the_three_lstm_decoders_with_and_without_caca():
    rows = list(plan("2", out_root="/tmp/x").values())
    assert [c.name for c in rows] == ["Att2in", "Att2in + CACA", "BUTD", "BUTD + CACA", "LB", "LB + CACA"]
    assert [(c.model.decoder, c.model.cross_attention, c.train.awc.enabled) for c in rows] == [
        (d, x, x == "caca") for d in ("att2in", "updown", "lookback") for x in ("vanilla", "caca")]
    # each decoder at its official sizes and function (Att2in2: rnn 512, max-out; Up-Down: rnn 1000,
    # word embedding 1000, pooled-feature embedding; Look-Back on Up-Down's), the anchors' recipe on COCO
    sizes = [(c.model.d_model, c.model.rnn.word_dim, c.model.rnn.att_hidden, c.model.rnn.maxout,
              c.model.rnn.pooled_embedding) for c in rows]
    assert sizes == [(512, 512, 512, True, False)] * 2 + [(1000, 1000, 512, False, True)] * 4
    same = {(c.model.encoder, c.model.dropout, c.train.schedule.name, c.train.schedule.lr,
             c.train.scheduled_sampling.max_prob, c.data.dataset, c.train.epochs, c.train.batch_size) for c in rows}
    assert same == {("embed", 0.5, "step", 5e-4, 0.25, "data/coco/dataset_coco.json", 30, 50)}


def test_ablate_table5_on_the_tiny_world(tiny_world, tiny_overrides, tmp_path):
    out = tmp_path / "t5"
    args = tiny_overrides(tiny_world, "ignored", **{"train.epochs": 1})
    args = [a for a in args if not a.startswith("out_dir=")]
    proc = subprocess.run([sys.executable, "-m", "catcap", "ablate", "--table", "5", "--out", str(out), "--beam", "2",
                           "--split", "val", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (out / "table.md").read_text()
    assert "| TCA |" in table and "| +OHC |" in table and "| +IHC |" in table and "| +CHC |" in table
    assert "126.5 |" in table and "128.9 |" in table  # the paper's column
    data = json.loads((out / "table.json").read_text())
    assert [r["label"] for r in data["rows"]] == ["TCA", "+OHC", "+IHC", "+CHC"]
    assert (data["split"], data["beam"]) == ("val", 2)
    check_rows_are_their_checkpoints_scores(out, data["rows"])
    check_markdown_is_the_json(table, data["rows"])
    config = json.loads((out / "table5_2_ohc" / "best" / "config.json").read_text())["config"]
    assert config["model"]["history"]["strategy"] == "ohc" and config["model"]["d_model"] == 32
    assert (out / "table5_2_ohc" / "training.png").read_bytes()[:4] == b"\x89PNG"  # each row's curves
    # a second call resumes finished rows instead of retraining or rescoring them
    again = subprocess.run([sys.executable, "-m", "catcap", "ablate", "--table", "5", "--out", str(out), "--beam", "2",
                            "--split", "val", *args], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count("resumed") == 4, again.stdout[-2000:]
    assert again.stdout.count("reusing the scores") == 4, again.stdout[-2000:]
    assert json.loads((out / "table.json").read_text())["rows"] == data["rows"]
    # a data file rewritten since (same path, new modification time) is scored again
    stat = os.stat(tiny_world.dataset)
    try:
        os.utime(tiny_world.dataset, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        third = subprocess.run([sys.executable, "-m", "catcap", "ablate", "--table", "5", "--out", str(out), "--beam", "2",
                                "--split", "val", *args], capture_output=True, text=True, timeout=600)
    finally:
        os.utime(tiny_world.dataset, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert third.returncode == 0 and third.stdout.count("reusing the scores") == 0, third.stdout[-2000:]
    assert json.loads((out / "table.json").read_text())["rows"] == data["rows"]  # same data, same scores


def check_rows_are_their_checkpoints_scores(out, rows):
    """Each row's metrics are its own best checkpoint scored on the table's split and beam, as
    ``catcap evaluate --checkpoint`` scores it (recomputed here for the Java-free metrics)."""
    from catcap.decoding import GenerationConfig
    from catcap.inference.evaluation import evaluate_checkpoint

    for row in rows:
        assert set(row["metrics"]) >= {"Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr"}
        ev, _ = evaluate_checkpoint(out / row["row"] / "best", split="val", generation=GenerationConfig(num_beams=2),
                                    metrics=("bleu", "rouge", "cider"),
                                    device="cpu", progress=False)
        for name, value in ev.corpus.items():
            assert row["metrics"][name] == pytest.approx(value, abs=1e-12), (row["label"], name)


def check_markdown_is_the_json(table: str, rows):
    """table.md: a header with the paper's columns, then one line per row with each metric x100
    to one decimal and the paper's CIDEr-D of that row."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["row", "Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "paper CIDEr-D"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    paper = {"TCA": "126.5", "+OHC": "126.8", "+IHC": "128.2", "+CHC": "128.9"}  # SPEC.md section 6, Table 5
    assert body == [[r["label"], *(f"{100 * r['metrics'][c]:.1f}" for c in header[1:-1]), paper[r["label"]]]
                    for r in rows]
