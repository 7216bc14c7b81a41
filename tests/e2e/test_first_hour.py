"""The README's chain on real Flickr8k photos, each command reading the last one's output as it
is (issue 42): `catcap import flickr8k` -> `catcap caption --refs` with two bundled models ->
`catcap evaluate` -> `catcap compare` -> `catcap report` -> `catcap human-eval create`.

Five validation photos and two training photos of ../shared/data/flickr8k (never part of the
repository; the test skips, saying so, without them or without the bundled models)."""

from __future__ import annotations

import json
import re

import pytest

from catcap.cli.main import main
from flickr8k_files import FLICKR8K

VAL, TRAIN = 5, 2


@pytest.fixture(scope="module")
def chain_inputs(tmp_path_factory):
    """(dataset JSON made by catcap import, folder of the 5 val photos)."""
    from catcap import zoo

    names = {e.name for e in zoo.list_models()}
    if not {"flickr8k-m2", "flickr8k-cat"} <= names:
        pytest.skip(f"the bundled models flickr8k-m2 and flickr8k-cat are not in {zoo.zoo_root()} (found {names})")
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    images = FLICKR8K / "images"
    lists = {split: FLICKR8K / f"Flickr_8k.{name}Images.txt" for split, name in (("val", "dev"), ("train", "train"))}
    if not images.is_dir() or not all(p.is_file() for p in lists.values()):
        pytest.skip(f"the Flickr8k photos and split lists are not in {FLICKR8K} "
                    "(see ../shared/data/flickr8k/README.md)")
    root = tmp_path_factory.mktemp("first_hour")
    chosen = {"val": lists["val"].read_text().split()[:VAL], "train": lists["train"].read_text().split()[:TRAIN]}
    for split, files in chosen.items():
        (root / f"{split}.txt").write_text("\n".join(files) + "\n")
    wanted = {f for files in chosen.values() for f in files}
    tokens = [line for line in (FLICKR8K / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines()
              if line.split("#")[0] in wanted]
    (root / "tokens.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    dataset = root / "dataset_flickr8k.json"
    assert main(["import", "flickr8k", "--tokens", str(root / "tokens.txt"), "--train", str(root / "train.txt"),
                 "--val", str(root / "val.txt"), "--images", str(images), "--out", str(dataset)]) == 0
    photos = root / "photos"
    photos.mkdir()
    for name in chosen["val"]:
        (photos / name).symlink_to(images / name)
    return dataset, photos


def test_caption_evaluate_compare_report_and_human_eval_read_each_others_files(chain_inputs, tmp_path, capsys):
    dataset, photos = chain_inputs
    refs = ["--refs", str(dataset), "--split", "val"]
    m2, cat = tmp_path / "m2.jsonl", tmp_path / "cat.jsonl"
    assert main(["caption", str(photos), "--refs", str(dataset), "--out", str(m2), "--quiet"]) == 0
    assert main(["caption", str(photos), "--refs", str(dataset), "--checkpoint", "flickr8k-cat", "--out", str(cat),
                 "--quiet"]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in m2.read_text(encoding="utf-8").splitlines()]
    ids = {img["filename"]: img["imgid"] for img in json.loads(dataset.read_text())["images"]}
    assert [r["image_id"] for r in rows] == [ids[p.name] for p in sorted(photos.iterdir())]
    assert all(set(r) == {"image", "image_id", "caption"} and r["caption"] for r in rows)

    scores = tmp_path / "scores.json"
    assert main(["evaluate", "--results", str(cat), *refs, "--metrics", "bleu,rouge,cider", "--output", str(scores),
                 "--quiet"]) == 0
    per_image = json.loads(scores.read_text())["per_image"]
    assert sorted(r["image_id"] for r in per_image) == sorted(ids[p.name] for p in photos.iterdir())
    coco = tmp_path / "cat_coco.json"  # the same captions in the COCO result format score the same
    coco.write_text(json.dumps([{"image_id": r["image_id"], "caption": r["caption"]} for r in
                                map(json.loads, cat.read_text(encoding="utf-8").splitlines())]))
    assert main(["evaluate", "--results", str(coco), *refs, "--metrics", "bleu,rouge,cider", "--output",
                 str(tmp_path / "coco_scores.json"), "--quiet"]) == 0
    assert json.loads((tmp_path / "coco_scores.json").read_text())["corpus"] == json.loads(scores.read_text())["corpus"]

    assert main(["compare", str(m2), str(cat), *refs, "--metrics", "bleu,cider", "--resamples", "100"]) == 0
    assert re.search(r"^CIDEr\s", capsys.readouterr().out, re.M)

    report = tmp_path / "report.html"
    assert main(["report", str(m2), str(cat), *refs, "--images", str(photos), "--names", "m2,cat",
                 "--resamples", "100", "--out", str(report)]) == 0
    assert report.read_text(encoding="utf-8").count('class="image-row"') == VAL
    capsys.readouterr()

    study = tmp_path / "study"
    assert main(["human-eval", "create", "--a", str(m2), "--b", str(cat), *refs, "--images", str(photos),
                 "--n", str(VAL), "--raters", "2", "--out", str(study)]) == 0
    said = capsys.readouterr()
    assert (said.out + said.err).count(f"{VAL} images") == 1, said  # the study is announced once
    manifest = json.loads((study / "study.json").read_text())
    assert len(manifest["items"]) == VAL and {i["caption_a"] for i in manifest["items"]} <= {r["caption"] for r in rows}
