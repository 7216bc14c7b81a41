"""The catcap command, run as a user runs it (a real subprocess).

Oracles: pycocoevalcap itself (its Java tokenizer and scorers) for the example's scores; the
real parser for the help texts' example commands; hand-made inputs for the error messages.
The example's score ranges (human vs human BLEU-4 / CIDEr) are plausibility bounds, not pins."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from catcap import api
from catcap.cli.main import build_parser
from help_examples import example_commands, parse_example


def catcap(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "catcap", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}")
    return proc


@pytest.mark.parametrize("command, count", [("evaluate", 8), ("compare", 1)])
def test_help_examples_are_commands_that_parse(command, count):
    """The examples of ``--help`` (as the installed command prints it) parse, option for option,
    with the values they show."""
    examples = example_commands(catcap(command, "--help").stdout)
    assert len(examples) == count
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    dest = {flag: a.dest for a in sub._actions for flag in a.option_strings}  # --beam -> num_beams
    for example in examples:
        args = parse_example(example)
        assert args.command == command
        for flag, value in zip(example, example[1:]):
            if flag.startswith("--") and not value.startswith("--"):
                got = getattr(args, dest[flag])
                got = [str(v) for v in got] if isinstance(got, list) else [str(got)]  # a repeatable option
                assert value in got, (example, flag)


def test_the_command_list_names_every_command():
    """``catcap`` alone lists every subcommand the parser has (none missing from the help)."""
    listed = catcap().stdout
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sub.choices and all(f"    {name}" in listed for name in sub.choices), listed


def test_evaluate_example_writes_toolkit_names(tmp_path):
    out = tmp_path / "scores.json"
    proc = catcap("evaluate", "--example", "--metrics", "bleu,rouge,cider,cider-plain", "--output", str(out))
    assert "Bleu_4" in proc.stdout and "CIDEr" in proc.stdout
    data = json.loads(out.read_text())
    assert set(data["corpus"]) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr", "CIDEr_plain"}
    assert len(data["per_image"]) == 50 and {"image_id", "CIDEr"} <= set(data["per_image"][0])
    assert 0.1 < data["corpus"]["Bleu_4"] < 0.4 and 0.4 < data["corpus"]["CIDEr"] < 1.5  # human vs human


def test_a_requested_metric_that_cannot_run_fails_the_command(tmp_path, monkeypatch):
    """SPICE needs the CoreNLP jars (pointed at an empty folder here): named in --metrics, its
    absence is exit 1 after the table; in the default set it is only reported (exit 0)."""
    (tmp_path / "no_jars").mkdir()
    monkeypatch.setenv("CATCAP_CORENLP_DIR", str(tmp_path / "no_jars"))
    out = tmp_path / "scores.json"
    proc = catcap("evaluate", "--example", "--metrics", "bleu,spice", "--output", str(out), check=False)
    assert proc.returncode == 1, proc.stderr
    assert "unavailable" in proc.stdout and "Bleu_4" in proc.stdout
    assert "requested but unavailable: spice" in proc.stderr
    assert "spice" in json.loads(out.read_text())["unavailable"]  # the scores that ran are still written
    default = catcap("evaluate", "--example", check=False)
    assert default.returncode == 0 and "unavailable" in default.stdout, default.stderr


def test_evaluate_matches_pycocoevalcap_on_the_example(java_available):
    """Against the real toolkit (its Java tokenizer included) on the bundled example."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    results_path, refs_path = api.example_files()
    ev = api.evaluate(results_path, refs_path, metrics="bleu,rouge,cider")
    res = {r["image_id"]: [{"caption": r["caption"]}] for r in json.loads(results_path.read_text())}
    gts = {}
    for a in json.loads(refs_path.read_text())["annotations"]:
        gts.setdefault(a["image_id"], []).append({"caption": a["caption"]})
    gts = {k: gts[k] for k in res}
    tok = PTBTokenizer()
    gts, res = tok.tokenize(gts), tok.tokenize(res)
    expected = dict(zip(["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"], Bleu(4).compute_score(gts, res, verbose=0)[0]))
    expected["ROUGE_L"] = Rouge().compute_score(gts, res)[0]
    expected["CIDEr"] = Cider().compute_score(gts, res)[0]
    for name, value in expected.items():
        assert ev.corpus[name] == pytest.approx(value, abs=1e-9), name


def test_compare_prints_a_table(tmp_path):
    results_path, refs_path = api.example_files()
    worse = [{"image_id": r["image_id"], "caption": "a photo"} for r in json.loads(results_path.read_text())]
    (tmp_path / "worse.json").write_text(json.dumps(worse))
    proc = catcap("compare", str(results_path), str(tmp_path / "worse.json"), "--refs", str(refs_path),
                  "--metrics", "bleu,cider", "--resamples", "200")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("CIDEr"))
    assert "-" in line.split()[3]  # B is worse
    assert "95% CI" in proc.stdout


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe not utf8", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b'[{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}]', "duplicate image ids"),
    (b'[{"image_id": 99999999, "caption": "a"}]', "references do not contain"),
    (b'{"foo": 1}', "expected a JSON list"),
])
def test_bad_results_exit_2_with_a_clear_message(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    _, refs_path = api.example_files()
    proc = catcap("evaluate", "--results", str(bad), "--refs", str(refs_path), "--metrics", "bleu", check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_empty_captions_score_zero_and_are_reported(tmp_path):
    results_path, refs_path = api.example_files()
    res = json.loads(results_path.read_text())
    res[0]["caption"] = ""
    res[1]["caption"] = " . ! "
    (tmp_path / "r.json").write_text(json.dumps(res))
    out = tmp_path / "s.json"
    proc = catcap("evaluate", "--results", str(tmp_path / "r.json"), "--refs", str(refs_path), "--metrics",
                  "bleu,rouge,cider", "--output", str(out))
    assert "2 candidate(s) are empty" in proc.stdout
    rows = json.loads(out.read_text())["per_image"]
    assert rows[0]["CIDEr"] == 0 and rows[1]["Bleu_1"] < 1e-6 and rows[1]["ROUGE_L"] == 0


def test_evaluate_against_a_karpathy_split_file(tmp_path):
    """References from a Karpathy dataset_*.json plus --split give the same scores as COCO annotations."""
    results_path, refs_path = api.example_files()
    anns = json.loads(refs_path.read_text())["annotations"]
    by_image = {}
    for a in anns:
        by_image.setdefault(a["image_id"], []).append(a["caption"])
    images = [{"cocoid": k, "split": "test", "filename": f"{k}.jpg",
               "sentences": [{"raw": c, "tokens": c.lower().split()} for c in caps]} for k, caps in by_image.items()]
    images.append({"cocoid": 1, "split": "train", "filename": "1.jpg", "sentences": [{"raw": "x", "tokens": ["x"]}]})
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"images": images, "dataset": "coco"}))
    a = api.evaluate(results_path, refs_path, metrics="bleu,cider")
    b = api.evaluate(results_path, karpathy, split="test", metrics="bleu,cider")
    assert a.corpus == b.corpus
    proc = catcap("evaluate", "--results", str(results_path), "--refs", str(karpathy), "--metrics", "bleu", check=False)
    assert proc.returncode == 2 and "--split" in proc.stderr and "test (50 images)" in proc.stderr


def test_synth_says_what_it_made_and_how_to_train_on_it(tmp_path):
    out = tmp_path / "world"
    text = catcap("synth", "--out", str(out), "--train", "6", "--val", "2", "--test", "2", "--feature-dim", "16").stdout
    assert f"world written to {out} (10 images)" in text and "PosixPath" not in text
    assert f"data.dataset={out / 'dataset_shapes.json'}" in text and "model.feature_dim=16" in text
    assert "out_dir=runs/world" in text  # not the demo's runs/demo/model
    assert (out / "dataset_shapes.json").is_file() and (out / "features.h5").is_file()


def test_path_errors_are_messages_not_tracebacks(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    proc = catcap("synth", "--out", str(tmp_path / "busy"), "--train", "2", "--val", "1", "--test", "1", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("catcap synth: error: ")
    assert "is not empty" in proc.stderr and "--overwrite" in proc.stderr
    dataset = tmp_path / "dataset_tiny.json"
    dataset.write_text(json.dumps({"images": [{"filename": f"{i}.jpg", "imgid": i, "split": split,
                                               "sentences": [{"raw": "a red circle"}]}
                                              for i, split in enumerate(["train", "val", "test"])]}))
    config = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "demo.yaml"
    proc = catcap("train", "--config", str(config), f"data.features={tmp_path / 'nope.h5'}", f"data.dataset={dataset}",
                  check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("catcap train: error: ")
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr
