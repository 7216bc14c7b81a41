"""A trained checkpoint in use: Captioner.generate, catcap evaluate --checkpoint, catcap caption."""

import json
import subprocess
import sys

import pytest

from catcap import Captioner, api


def _train(world, out, overrides):
    pos = api.train(None, overrides(world, out, **{"train.epochs": 1}), log=lambda m: None)
    assert pos.step > 0
    return out / "best"


def test_generate_evaluate_and_caption(tiny_world, tiny_overrides, tmp_path):
    best = _train(tiny_world, tmp_path / "run", tiny_overrides)
    cap = Captioner.from_pretrained(best)
    from catcap.data.features import open_feature_store

    store = open_feature_store(tiny_world.features)
    feats = [store.get(k).regions for k in store.keys()[:3]]
    default = cap.generate(feats)
    assert len(default) == 3 and all(isinstance(t, str) and t for t in default)
    assert cap.generate(feats, num_beams=3, max_length=20) == default  # GenerationConfig's defaults
    assert all(isinstance(t, str) and t for t in cap.generate(feats, num_beams=1))
    beams = cap.generate(feats, num_beams=3, num_return_sequences=2)
    assert len(beams) == 3 and all(len(b) == 2 for b in beams)
    samples = cap.generate(feats, do_sample=True, top_p=0.9, num_return_sequences=4, seed=1)
    assert samples == cap.generate(feats, do_sample=True, top_p=0.9, num_return_sequences=4, seed=1)
    with pytest.raises(ValueError, match="expects 32-d features"):
        cap.generate([f[:, :8] for f in feats])

    results = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "catcap", "evaluate", "--checkpoint", str(best), "--beam", "2",
                           "--metrics", "bleu,cider", "--save-results", str(results)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "CIDEr" in proc.stdout and "(30 images)" in proc.stdout
    rows = json.loads(results.read_text())
    assert len(rows) == 30 and {"image_id", "caption"} == set(rows[0])

    key = store.keys()[0]
    proc = subprocess.run([sys.executable, "-m", "catcap", "caption", "--checkpoint", str(best),
                           f"{tiny_world.images}/{key}.png", key], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].split(": ", 1)[1] == lines[1].split(": ", 1)[1]
    # only image files (as in `catcap caption --help`): a world's images are named by their feature key
    files = [f"{tiny_world.images}/{k}.png" for k in store.keys()[:2]]
    proc = subprocess.run([sys.executable, "-m", "catcap", "caption", "--checkpoint", str(best), *files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [line.split(": ", 1)[0] for line in proc.stdout.strip().splitlines()] == files
    assert proc.stdout.strip().splitlines()[0].split(": ", 1)[1] == lines[0].split(": ", 1)[1]
    with pytest.raises(ValueError, match="not a catcap image encoder"):
        cap.generate(images=files)
    bad = subprocess.run([sys.executable, "-m", "catcap", "caption", "--checkpoint", str(best), "no-such-image"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "have no features" in bad.stderr and "no-such-image" in bad.stderr


def test_a_run_with_relative_data_paths_is_evaluated_from_another_folder(tiny_world, tiny_overrides, tmp_path,
                                                                         monkeypatch):
    import os

    work, elsewhere = tmp_path / "work", tmp_path / "else" / "where"
    work.mkdir()
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(work)  # train as `catcap train` run in `work`, with paths relative to it
    relative = {"data.dataset": os.path.relpath(tiny_world.dataset, work),
                "data.features": os.path.relpath(tiny_world.features, work)}
    api.train(None, tiny_overrides(tiny_world, "run", **{"train.epochs": 1, **relative}), log=lambda m: None)
    best = work / "run" / "best"
    assert not (elsewhere / relative["data.dataset"]).exists()  # the recorded paths do not open from there
    proc = subprocess.run([sys.executable, "-m", "catcap", "evaluate", "--checkpoint", str(best), "--beam", "1",
                           "--metrics", "bleu"], capture_output=True, text=True, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert "(30 images)" in proc.stdout
    # --features replaces the checkpoint's feature store; a folder without images is refused
    proc = subprocess.run([sys.executable, "-m", "catcap", "evaluate", "--checkpoint", str(best), "--beam", "1",
                           "--metrics", "bleu", "--features", str(elsewhere / "none.h5")],
                          capture_output=True, text=True, cwd=elsewhere)
    assert proc.returncode == 2 and "none.h5" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "catcap", "caption", "--checkpoint", str(best), str(elsewhere)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "is a folder with no image files" in proc.stderr
