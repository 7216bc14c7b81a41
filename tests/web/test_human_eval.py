"""``catcap human-eval create`` and ``export``: the study (sampling, orders, manifest), the vote
store (WAL, replacing, resuming), and the statistics checked against hand-computed values."""

from __future__ import annotations

import csv
import json
import sqlite3
from fractions import Fraction

import pytest
from PIL import Image

from caption_files import check_example_values, study_inputs
from catcap.cli.main import main
from catcap.cli.report_cmds import CREATE_HELP, EXPORT_HELP, HUMAN_EVAL_HELP, SERVE_HELP
from catcap.web.human_eval.app import next_item, rated_items
from catcap.web.human_eval.export import export_study, winner
from catcap.web.human_eval.stats import fleiss_kappa, sign_test
from catcap.web.human_eval.study import create_study, load_study
from help_examples import example_commands, parse_example


@pytest.fixture
def inputs(tmp_path):
    return study_inputs(tmp_path / "in", count=12, only_a=2)


def make(inputs, out, **kw):
    args = dict(n=8, raters=5, seed=0, names="base,cat") | kw
    return create_study(out, inputs["a"], inputs["b"], inputs["refs"], inputs["images"], split="test", **args)


# ------------------------------------------------------------------ create

def test_same_seed_same_study_other_seed_other_study(inputs, tmp_path):
    one, two = make(inputs, tmp_path / "s1"), make(inputs, tmp_path / "s2")
    other = make(inputs, tmp_path / "s3", seed=1)
    assert one.manifest["items"] == two.manifest["items"] and one.manifest["raters"] == two.manifest["raters"]
    assert ([i["image_id"] for i in one.items], one.manifest["raters"]) != \
           ([i["image_id"] for i in other.items], other.manifest["raters"])


def test_sample_only_from_images_both_systems_captioned(inputs, tmp_path):
    both = set(inputs["captions_b"])  # B lacks the last 2 of A's 12 images
    seen = set()
    for seed in range(6):
        study = make(inputs, tmp_path / f"s{seed}", seed=seed)
        ids = [i["image_id"] for i in study.items]
        assert len(ids) == 8 == len(set(ids)) and set(ids) <= both
        seen |= set(ids)
    assert len(seen) > 8  # different seeds draw different images
    with pytest.raises(ValueError, match="only 10 image.s. are captioned by both systems; use --n 10 or fewer"):
        make(inputs, tmp_path / "big", n=11)
    assert not (tmp_path / "big").exists()


def test_orders_are_permutations_and_sides_balanced(inputs, tmp_path):
    study = make(inputs, tmp_path / "s", n=7, raters=5)
    raters = study.manifest["raters"]
    assert [r["id"] for r in raters] == ["r1", "r2", "r3", "r4", "r5"]
    for r in raters:
        assert sorted(r["order"]) == list(range(7))
        assert sum(r["a_left"]) in (3, 4)  # per rater: floor or ceil of 7 / 2
    for item in range(7):
        assert sum(r["a_left"][item] for r in raters) in (2, 3)  # per image: floor or ceil of 5 / 2
    assert len({tuple(r["order"]) for r in raters}) > 1  # raters see different orders


def test_manifest_captions_images_and_rater_ids(inputs, tmp_path):
    study = make(inputs, tmp_path / "s", raters=None, rater_ids="ann,bo-2")
    manifest = json.loads((tmp_path / "s" / "study.json").read_text())
    assert manifest["format"] == "catcap-human-eval-study" and manifest["seed"] == 0
    assert manifest["systems"]["A"]["name"] == "base" and manifest["systems"]["B"]["name"] == "cat"
    assert [c["key"] for c in manifest["criteria"]] == ["relevance", "coherence"]
    assert [r["id"] for r in manifest["raters"]] == ["ann", "bo-2"]
    for item in study.items:
        assert item["caption_a"] == inputs["captions_a"][item["image_id"]]
        assert item["caption_b"] == inputs["captions_b"][item["image_id"]]
        with Image.open(tmp_path / "s" / item["image"]) as img:
            assert img.format == "JPEG" and img.size == (320, 240)  # copied, small enough to stay as is
    assert load_study(tmp_path / "s").manifest == manifest


def test_create_refuses_bad_input(inputs, tmp_path):
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError, match="never overwritten"):
        make(inputs, tmp_path / "exists")
    with pytest.raises(ValueError, match="--raters must be >= 1"):
        make(inputs, tmp_path / "x", raters=0)
    with pytest.raises(ValueError, match="--raters 3 but 2 --rater-ids"):
        make(inputs, tmp_path / "x", raters=3, rater_ids="a,b")
    with pytest.raises(ValueError, match="rater ids may use"):
        make(inputs, tmp_path / "x", raters=None, rater_ids="a b,c")
    with pytest.raises(FileNotFoundError, match="image folder .* does not exist"):
        create_study(tmp_path / "x", inputs["a"], inputs["b"], inputs["refs"], tmp_path / "nowhere", split="test")
    assert not (tmp_path / "x").exists()
    with pytest.raises(FileNotFoundError, match="not a study folder"):
        load_study(tmp_path / "exists")


# ------------------------------------------------------------------ store

def test_store_is_wal_and_a_new_answer_replaces_the_old(inputs, tmp_path):
    study = make(inputs, tmp_path / "s")
    with sqlite3.connect(tmp_path / "s" / "votes.sqlite") as conn:  # a fresh connection reads the file's mode
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store = study.store()
    store.record("r1", 3, {"relevance": "A", "coherence": "none"}, "B")
    store.record("r1", 3, {"relevance": "B", "coherence": "B"}, "B")
    votes = store.votes()
    assert [(v.rater, v.item, v.criterion, v.choice) for v in votes] == [("r1", 3, "coherence", "B"),
                                                                         ("r1", 3, "relevance", "B")]
    with pytest.raises(ValueError, match="choices must be one of"):
        store.record("r1", 4, {"relevance": "left"}, "A")
    assert len(store.votes()) == 2


def test_resume_at_the_first_unrated_image_of_the_raters_order(inputs, tmp_path):
    study = make(inputs, tmp_path / "s")
    order = study.raters["r2"]["order"]
    store = study.store()
    assert next_item(study, "r2", rated_items(study, "r2")) == order[0]
    store.record("r2", order[0], {"relevance": "A", "coherence": "A"}, "A")
    store.record("r2", order[2], {"relevance": "skip", "coherence": "skip"}, "A")  # a skip counts as rated
    store.record("r2", order[1], {"relevance": "B"}, "A")  # half an answer does not
    assert next_item(study, "r2", rated_items(study, "r2")) == order[1]
    assert next_item(study, "r1", rated_items(study, "r1")) == study.raters["r1"]["order"][0]


# ------------------------------------------------------------------ statistics

def test_fleiss_kappa_on_fleiss_1971_style_textbook_table():
    # The worked example of Fleiss' kappa (Wikipedia "Fleiss' kappa"): 10 subjects, 14 raters,
    # 5 categories. p_j = (20, 28, 39, 21, 32) / 140; P_e = (400+784+1521+441+1024)/19600 = 4170/19600.
    # Per subject sum_j n_ij^2 = 196, 60, 70, 94, 74, 98, 58, 46, 66, 66 -> P_i = (s - 14) / 182,
    # sum P_i = (828 - 140) / 182 = 688/182, P-bar = 688/1820.
    # kappa = (688/1820 - 4170/19600) / (1 - 4170/19600) = 0.20993 (0.210 in the article).
    table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
             [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    p_bar, p_e = Fraction(688, 1820), Fraction(4170, 19600)
    assert fleiss_kappa(table) == pytest.approx(float((p_bar - p_e) / (1 - p_e)), abs=1e-12)
    assert fleiss_kappa(table) == pytest.approx(0.20993, abs=5e-6)
    assert fleiss_kappa([[5, 0, 0], [5, 0, 0]]) is None  # one category only: P_e = 1, undefined
    assert fleiss_kappa([[1, 0, 0]]) is None  # no image with two ratings
    assert fleiss_kappa([[2, 0], [0, 2]]) == pytest.approx(1.0)  # perfect agreement, both categories used


def test_sign_test_exact_two_sided():
    # n = 8, k = 1: 2 * (C(8,0) + C(8,1)) / 2^8 = 18 / 256
    assert sign_test(1, 7) == sign_test(7, 1) == pytest.approx(18 / 256, abs=1e-15)
    assert sign_test(0, 5) == pytest.approx(2 / 32, abs=1e-15)  # 2 * C(5,0) / 2^5
    assert sign_test(0, 10) == pytest.approx(2 / 1024, abs=1e-15)
    assert sign_test(2, 2) == 1.0 and sign_test(0, 0) == 1.0  # 2 * 11/16 > 1 is capped; nothing to test
    assert sign_test(3, 9) == pytest.approx(2 * (1 + 12 + 66 + 220) / 4096, abs=1e-15)


def test_winner_needs_more_than_half_of_all_raters():
    assert winner(3, 1, 5) == "A" and winner(2, 2, 5) == "tie" and winner(2, 3, 5) == "B"
    assert winner(2, 0, 4) == "tie" and winner(3, 0, 4) == "A" and winner(1, 0, 1) == "A"


# ------------------------------------------------------------------ export against a hand-made table

# 6 images x 5 raters (r1..r5); per image the votes (A, B, none) per criterion; r5 skips image 3
# (so image 3 has 4 ratings). The left/right order does not matter here: votes name systems.
RELEVANCE = [(0, 5, 0), (0, 4, 1), (1, 3, 1), (0, 3, 1), (2, 3, 0), (2, 2, 1)]
COHERENCE = [(3, 1, 1), (1, 1, 3), (4, 0, 1), (2, 1, 1), (5, 0, 0), (1, 2, 2)]
# Winners (> 5/2, i.e. >= 3 votes): relevance B B B B B tie -> A 0, B 5, ties 1;
#   coherence A tie A tie A tie -> A 3, B 0, ties 3 (image 3: A has 2 of 5, the skip counts for neither).
# Sign tests: relevance n = 5, k = 0: 2 * 1/32 = 0.0625; coherence n = 3, k = 0: 2 * 1/8 = 0.25.
# Fleiss' kappa, relevance: P_i = (sum n^2 - n_i) / (n_i (n_i - 1)) = 20/20, 12/20, 6/20, 6/12 (n = 4),
#   8/20, 4/20 -> P-bar = 3.0 / 6 = 1/2; totals A 5, B 20, none 4 of 29 ratings -> P_e = 441/841;
#   kappa = (1/2 - 441/841) / (400/841) = (420.5 - 441) / 400 = -41/800.
# Coherence: P_i = 6/20, 6/20, 12/20, 2/12 (n = 4), 20/20, 4/20 -> P-bar = 77/180; totals A 16,
#   B 5, none 8 of 29 -> P_e = 345/841; kappa = (77*841 - 345*180) / (180*496) = 2657/89280.
KAPPA = {"relevance": -41 / 800, "coherence": 2657 / 89280}


def _fill(study, table, criterion):
    store, raters = study.store(), list(study.raters)
    for item, counts in enumerate(table):
        choices = ["A"] * counts[0] + ["B"] * counts[1] + ["none"] * counts[2]
        if item == 3:
            choices.append("skip")
        for rater, choice in zip(raters, choices):
            store.record(rater, item, {criterion: choice}, study.left_system(rater, item))


def test_export_against_a_hand_made_vote_table(inputs, tmp_path):
    study = make(inputs, tmp_path / "s", n=6, raters=5)
    _fill(study, RELEVANCE, "relevance")
    _fill(study, COHERENCE, "coherence")
    summary = export_study(tmp_path / "s", tmp_path / "out")
    rel, coh = summary["criteria"]["relevance"], summary["criteria"]["coherence"]
    assert (rel["wins_A"], rel["wins_B"], rel["ties"]) == (0, 5, 1)
    assert (coh["wins_A"], coh["wins_B"], coh["ties"]) == (3, 0, 3)
    assert rel["sign_test_p"] == pytest.approx(0.0625, abs=1e-15)
    assert coh["sign_test_p"] == pytest.approx(0.25, abs=1e-15)
    for crit, value in KAPPA.items():
        assert summary["criteria"][crit]["fleiss_kappa"] == pytest.approx(value, abs=1e-12)
    assert rel["votes"] == {"A": 5, "B": 20, "none": 4, "skip": 1, "missing": 0}
    assert summary["majority"] == 3 and summary["rated_per_rater"] == {f"r{i}": 6 for i in range(1, 6)}

    rows = list(csv.DictReader(open(tmp_path / "out" / "winners.csv", encoding="utf-8")))
    by = {(r["criterion"], int(r["item"])): r for r in rows}
    assert [by["relevance", i]["winner_name"] for i in range(6)] == ["cat"] * 5 + ["tie"]
    assert [by["coherence", i]["winner"] for i in range(6)] == ["A", "tie", "A", "tie", "A", "tie"]
    assert by["coherence", 3]["skipped"] == "1" and by["coherence", 3]["votes_A (base)"] == "2"
    assert by["relevance", 0]["image_id"] == str(study.items[0]["image_id"])
    votes = list(csv.DictReader(open(tmp_path / "out" / "votes.csv", encoding="utf-8")))
    assert len(votes) == 60 and {v["system_name"] for v in votes} == {"base", "cat", "none", "skip"}
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == json.loads(json.dumps(summary))
    page = (tmp_path / "out" / "summary.html").read_text()
    assert "<td>relevance</td><td>0</td><td>5</td><td>1</td><td>-0.051</td><td>0.0625</td>" in page


def test_export_counts_missing_raters_and_cli_prints_the_table(inputs, tmp_path, capsys):
    study = make(inputs, tmp_path / "s", n=2, raters=3)
    store = study.store()
    for rater in ("r1", "r2"):  # r3 never came: 2 of 3 is still more than half
        store.record(rater, 0, {"relevance": "B", "coherence": "A"}, "A")
    assert main(["human-eval", "export", str(tmp_path / "s"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "a win needs 2 votes" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    rel = summary["criteria"]["relevance"]
    assert (rel["wins_A"], rel["wins_B"], rel["ties"]) == (0, 1, 1)
    assert rel["votes"]["missing"] == 4  # image 0: r3; image 1: all three
    assert rel["fleiss_kappa"] is None  # all ratings in one category: undefined
    assert summary["rated_per_rater"] == {"r1": 1, "r2": 1, "r3": 0}


def test_cli_create_and_errors(inputs, tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["human-eval", "create", "--a", str(inputs["a"]), "--b", str(inputs["b"]), "--refs",
                 str(inputs["refs"]), "--split", "test", "--images", str(inputs["images"]), "--n", "4",
                 "--out", str(out)]) == 0
    assert "raters r1, r2, r3, r4, r5" in capsys.readouterr().out  # 5 raters by default
    assert len(load_study(out).items) == 4
    assert main(["human-eval", "export", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
    assert "not a study folder" in capsys.readouterr().err


@pytest.mark.parametrize("text", [HUMAN_EVAL_HELP, CREATE_HELP, SERVE_HELP, EXPORT_HELP])
def test_help_examples_parse(text):
    commands = example_commands(text)
    assert commands
    for argv in commands:
        args = parse_example(argv)
        assert args.func.__name__ == f"cmd_{argv[1]}"
        check_example_values(argv, args)
