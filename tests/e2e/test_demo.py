"""`catcap demo` end to end on a small world: trains, evaluates, beats the baseline."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_demo_small_world_beats_the_most_frequent_caption(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "catcap", "demo", "--out", str(tmp_path / "demo"), "--train-images", "800",
         "--beam", "2", "train.epochs=4", "train.progress=false", "train.schedule.warmup=200"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    row = re.search(r"^CIDEr\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert row, out
    model, baseline = float(row.group(1)), float(row.group(2))
    assert model > 3 * baseline and model > 0.3, out
    assert "catcap:" in out and "reference:" in out
    assert (tmp_path / "demo" / "model" / "best" / "model.safetensors").exists()
    assert (tmp_path / "demo" / "model" / "training.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_compare_prints_one_table_for_five_models(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "catcap", "demo", "--out", str(tmp_path / "demo"), "--train-images", "200",
         "--beam", "2", "--compare", "transformer,cat,lightcat,m2_caca,updown_caca", "train.epochs=1", "train.progress=false",
         "train.schedule.warmup=50", "train.eval_batch_size=100"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    header = re.search(r"^metric\s+tiny transformer\s+tiny cat\s+tiny lightcat\s+tiny m2_caca\s+tiny updown_caca"
                       r"\s+most frequent caption$", out, re.M)
    assert header, out
    assert re.search(r"^CIDEr(\s+[\d.]+){6}$", out, re.M), out
    assert "  cat:" in out and "  lightcat:" in out and "  transformer:" in out and "  m2_caca:" in out
    for name in ("transformer", "cat", "lightcat", "m2_caca", "updown_caca"):
        assert (tmp_path / "demo" / "models" / name / "best" / "model.safetensors").exists()
    cat_config = (tmp_path / "demo" / "models" / "cat" / "best" / "config.json").read_text()
    assert '"cross_attention": "caca"' in cat_config and '"enabled": true' in cat_config
    m2_config = json.loads((tmp_path / "demo" / "models" / "m2_caca" / "best" / "config.json").read_text())["config"]["model"]
    assert (m2_config["encoder"], m2_config["decoder"], m2_config["cross_attention"], m2_config["memory_slots"]) == \
        ("memory_augmented", "meshed", "caca", 40)
    assert m2_config["d_model"] == 128  # the demo's tiny sizes, not the preset's paper size
    lstm = json.loads((tmp_path / "demo" / "models" / "updown_caca" / "best" / "config.json").read_text())["config"]
    assert (lstm["model"]["decoder"], lstm["model"]["cross_attention"], lstm["model"]["decoder_layers"],
            lstm["model"]["d_model"], lstm["model"]["rnn"]) == ("updown", "caca", 1, 128, {
                "word_dim": 64, "att_hidden": 64, "maxout": False, "pooled_embedding": True})  # updown.yaml's official form
    assert lstm["train"]["schedule"]["name"] == "step" and lstm["train"]["scheduled_sampling"]["enabled"]
    # 4 steps of Up-Down's step schedule write no word: said, not left as a column of zeros
    empty = re.findall(r"warning: the tiny (\S+) wrote no word for any test image", proc.stderr + out)
    assert empty == ["updown_caca"], (empty, out)


def test_demo_compare_rejects_an_unknown_preset(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "catcap", "demo", "--out", str(tmp_path), "--compare", "transformer,catt"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert ("unknown model preset 'catt' for --compare; choose from: aoanet, aoanet_caca, aoanet_light_caca, "
            "aoanet_tiny, att2in, att2in_caca, cat, lightcat, lookback, "
            "lookback_caca, m2, m2_caca, m2_caca_gated, m2_caca_tiny, m2_light_caca, m2_official, m2_official_caca, "
            "m2_tiny, tiny, transformer, updown, updown_caca, updown_light_caca, updown_tiny, vlp, vlp_region_terms, "
            "vlp_small") in proc.stderr
    assert not (tmp_path / "world").exists(), "presets are checked before any work starts"


def test_compare_overrides_take_the_family_recipe_at_its_tiny_size():
    """An AoANet preset brings its parts, recipe (label smoothing, value clipping, schedule,
    scheduled sampling) and AWC, at aoanet_tiny.yaml's sizes; an Up-Down one updown_tiny.yaml's."""
    from catcap.config import load_config
    from catcap.demo import DEMO_CONFIG, variant_overrides
    from catcap.training.experiment import ExperimentConfig

    cfg = load_config(ExperimentConfig, DEMO_CONFIG, variant_overrides("aoanet_caca"))
    m, t = cfg.model, cfg.train
    assert (m.encoder, m.decoder, m.cross_attention, m.d_model, m.num_heads, m.encoder_layers, m.decoder_layers,
            m.rnn.word_dim, m.dropout, m.feature_dim) == ("aoa_refiner", "aoa", "caca", 128, 4, 2, 1, 64, 0.3, 2048)
    assert (t.label_smoothing, t.grad_clip, t.grad_clip_mode, t.schedule.name, t.schedule.lr, t.awc.enabled,
            t.scheduled_sampling.max_prob) == (0.2, 0.1, "value", "step", 2e-4, True, 0.5)
    updown = load_config(ExperimentConfig, DEMO_CONFIG, variant_overrides("updown")).model
    assert (updown.d_model, updown.rnn.word_dim, updown.rnn.att_hidden, updown.dropout) == (128, 64, 64, 0.3)
    assert updown.rnn.pooled_embedding and not updown.rnn.maxout  # the preset's cell forms, the tiny sizes
    att2in = load_config(ExperimentConfig, DEMO_CONFIG, variant_overrides("att2in_caca")).model
    assert (att2in.decoder, att2in.d_model, att2in.rnn.maxout, att2in.rnn.pooled_embedding) == ("att2in", 128, True, False)
    transformer = load_config(ExperimentConfig, DEMO_CONFIG, variant_overrides("cat"))
    assert transformer.train.label_smoothing == 0.0 and transformer.train.grad_clip_mode == "norm"


README_RANGES = re.compile(r"prints CIDEr-D between (\d+(?:\.\d+)?) and (\d+(?:\.\d+)?) and BLEU-4 between (\d+(?:\.\d+)?) "
                           r"and (\d+(?:\.\d+)?)")  # numbers without the sentence's full stop


@pytest.mark.skipif(os.environ.get("CATCAP_FULL_DEMO") != "1",
                    reason="the full `make demo` takes ~3.5 min on 2 cores: CATCAP_FULL_DEMO=1 runs it")
def test_make_demo_is_the_demo_and_prints_the_readmes_ranges(tmp_path):
    """`make demo` is `catcap demo` with its defaults (checked on make's dry run), and that prints
    the test CIDEr-D and BLEU-4 within the ranges the README states."""
    repo = Path(__file__).resolve().parents[2]
    dry = subprocess.run(["make", "-n", "demo"], cwd=repo, capture_output=True, text=True)
    assert dry.returncode == 0 and dry.stdout.strip().splitlines()[-1].endswith("bin/catcap demo"), dry.stdout
    low_c, high_c, low_b, high_b = map(float, README_RANGES.search((repo / "README.md").read_text()).groups())
    proc = subprocess.run([sys.executable, "-m", "catcap", "demo", "--out", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cider = float(re.search(r"^CIDEr\s+([\d.]+)\s+[\d.]+$", proc.stdout, re.M).group(1))
    bleu4 = float(re.search(r"^Bleu_4\s+([\d.]+)\s+[\d.]+$", proc.stdout, re.M).group(1))
    assert low_c <= cider <= high_c and low_b <= bleu4 <= high_b, proc.stdout
