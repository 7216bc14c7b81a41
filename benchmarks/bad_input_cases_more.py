"""The bad-input catalogue's cases, continued (see bad_input_cases.py): configs, reference and result
files, importers, numbers, permissions, interrupted runs and derived outputs; the commands'
options and the output paths are in bad_input_cases_options.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bad_input_cases import (IDS, VOTE, Case, _export_before, _log, _study, ck, ev, evck, ex, first, photos, refs,
                             res, train, validate)
from bad_input_context import jpeg_bytes, tiny, write


def imp_f8k(d, tokens, train_list="1000268201_693b08cb0e.jpg\n", val_list="1001773457_577c3a7d70.jpg\n"):
    return ["import", "flickr8k", "--tokens", write(d / "tok.txt", tokens), "--train", write(d / "train.txt", train_list),
            "--val", write(d / "val.txt", val_list), "--out", d / "data.json"]


TOKENS = ("1000268201_693b08cb0e.jpg#0\tA child climbs the stairs .\n"
          "1001773457_577c3a7d70.jpg#0\tA black dog and a spotted dog are fighting\n")


def imp_coco(d, data, *extra):
    return ["import", "coco", "--captions", write(d / "captions.json", data), "--out", d / "data.json", *extra]


COCO = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "caption": "a dog runs"}]}


def coco_with(**change):
    import copy

    data = copy.deepcopy(COCO)
    data.update(change)
    return data


def _prep(d, dataset):
    return ["prepare", "--dataset", dataset, "--out", d / "prep"]


def _votes_of_another_study(c, d):
    _export_before(d, c)
    return ["human-eval", "export", _study(d, c, votes=[("zz", 0, "relevance", "A", "A", "t")]), "--out", d / "out"]


def _partial_caption(c, d):
    """A caption .partial started with other settings (beam 5) must be refused, not mixed in."""
    import json

    from catcap.inference.caption_file import HEADER

    out = d / "caps.jsonl"
    write(d / "caps.jsonl.partial", json.dumps({HEADER: {"beam": 5}}) + "\n")
    return ["caption", "--checkpoint", c.photo_model, "--beam", "1", "--max-len", "5", "--workers", "0", "--quiet",
            "--out", out, sorted(c.photos.glob("*.jpg"))[0]]


def _killed_extract(c, d):
    """An extract killed after its first batch: the rerun continues the .partial."""
    import subprocess

    folder = photos(d, {f"{i}.jpg": jpeg_bytes(size=(40 + i, 32)) for i in range(6)})
    line = [sys.executable, "-m", "catcap", *map(str, ex(folder, d, "--batch-size", "2"))]
    env = dict(os.environ, CATCAP_FAULT="extract.after_batch:kill:1")
    subprocess.run(line, env=env, capture_output=True, timeout=600)
    assert (d / "out.h5.partial").exists()
    return ex(folder, d, "--batch-size", "2")


def _killed_training(c, d):
    """A training killed at its 3rd log record: --resume continues it."""
    import subprocess

    line = [sys.executable, "-m", "catcap", *map(str, train(c, d, **{"train.max_steps": 6, "train.save_every": 2}))]
    env = dict(os.environ, CATCAP_FAULT="runlog.after_append:kill:4")
    subprocess.run(line, env=env, capture_output=True, timeout=600)
    return [*train(c, d, **{"train.max_steps": 6, "train.save_every": 2}), "--resume"]


def _study_votes_garbage(c, d):
    study = _study(d, c)
    (study / "votes.sqlite").write_bytes(b"not a database at all" * 50)
    return ["human-eval", "export", study, "--out", d / "out"]


MORE_CASES: list[Case] = [
    # ---------------------------------------------------------------- configs
    Case("config-unknown-key", "configs", lambda c, d: validate(c, d, **{"train.epoch": 3}), 2, ("'epoch'", "epochs"),
         fast=True),
    Case("config-unknown-section", "configs", lambda c, d: validate(c, d, **{"trian.epochs": 3}), 2, ("'trian'",)),
    Case("config-wrong-type", "configs", lambda c, d: validate(c, d, **{"train.epochs": "many"}), 2,
         ("train.epochs", "expected int", "'many'")),
    Case("config-nan", "configs", lambda c, d: validate(c, d, **{"train.schedule.lr": ".nan"}), 2,
         ("train.schedule.lr", "finite", "nan"), fast=True),
    Case("config-inf", "configs", lambda c, d: validate(c, d, **{"train.label_smoothing": ".inf"}), 2,
         ("train.label_smoothing", "finite")),
    Case("config-overflow", "configs", lambda c, d: validate(c, d, **{"train.scst.lr": "1e999"}), 2,
         ("train.scst.lr", "finite")),
    Case("config-nan-trains", "configs", lambda c, d: train(c, d, **{"model.dropout": ".nan"}), 2,
         ("model.dropout", "finite")),
    Case("config-batch-zero", "configs", lambda c, d: validate(c, d, **{"train.batch_size": 0}), 2,
         ("train.batch_size", ">= 1")),
    Case("config-negative-lr", "configs", lambda c, d: validate(c, d, **{"train.schedule.lr": -1}), 2,
         ("train.schedule.lr", ">= 0")),
    Case("config-dropout-1", "configs", lambda c, d: validate(c, d, **{"model.dropout": 1.5}), 2, ("model.dropout",)),
    Case("config-heads", "configs", lambda c, d: validate(c, d, **{"model.num_heads": 5}), 2, ("num_heads",)),
    Case("config-bool-for-int", "configs", lambda c, d: validate(c, d, **{"train.epochs": "true"}), 2,
         ("train.epochs", "boolean")),
    Case("config-list-for-number", "configs", lambda c, d: validate(c, d, **{"train.epochs": "[1,2]"}), 2,
         ("train.epochs",)),
    Case("config-number-for-text", "configs", lambda c, d: validate(c, d, **{"name": 2024}), 2, ("quote it",)),
    Case("config-file-not-yaml", "configs", lambda c, d: ["validate-config", "--config", write(d / "c.yaml", "a: [b\n")],
         2, ("c.yaml", "YAML", "line 2")),
    Case("config-file-not-mapping", "configs", lambda c, d: ["validate-config", "--config", write(d / "c.yaml", "- 1\n")],
         2, ("c.yaml", "mapping")),
    Case("config-file-missing", "configs", lambda c, d: ["validate-config", "--config", d / "none.yaml"], 2,
         ("none.yaml", "not found")),
    Case("config-file-a-folder", "configs", lambda c, d: ["validate-config", "--config", d], 2, ("folder",)),
    Case("config-base-cycle", "configs", lambda c, d: ["validate-config", "--config", write(d / "a.yaml", "base: b.yaml\n")
                                                       if write(d / "b.yaml", "base: a.yaml\n") else None], 2,
         ("cycle",)),
    Case("config-file-not-utf8", "configs", lambda c, d: ["validate-config", "--config", write(d / "c.yaml",
                                                                                            b"name: caf\xe9\n")], 2,
         ("c.yaml",)),
    Case("config-override-without-value", "configs", lambda c, d: ["validate-config", "train.epochs"], 2,
         ("key=value",)),
    Case("config-override-bad-yaml", "configs", lambda c, d: ["validate-config", "--no-data", "train.epochs=[1"], 2,
         ("train.epochs", "YAML")),
    Case("config-dataset-missing-split", "configs", lambda c, d: validate(c, d, **{"data.dataset": refs(
        c, d, lambda x: [im.update(split="train") for im in x["images"] if im["split"] == "val"])}), 2,
         ("'val'",)),
    # ---------------------------------------------------------------- reference files
    Case("refs-not-json", "references", lambda c, d: ev(res(c, d), write(d / "d.json", "{"), d), 2,
         ("d.json", "not valid JSON"), fast=True),
    Case("refs-not-utf8", "references", lambda c, d: ev(res(c, d), write(d / "d.json", b'{"images": [\xff]}'), d), 2,
         ("d.json", "UTF-8")),
    Case("refs-neither-format", "references", lambda c, d: ev(res(c, d), write(d / "d.json", [1, 2]), d), 2,
         ("d.json", "COCO", "Karpathy")),
    Case("refs-entry-not-object", "references", lambda c, d: ev(res(c, d), write(d / "d.json", {"images": [3]}), d), 2,
         ("d.json", "images[0]", "expected an object")),
    Case("refs-entry-without-id", "references", lambda c, d: ev(res(c, d), refs(c, d, first(
        c, lambda im: im.pop("cocoid") and im.pop("imgid", None))), d), 2, ("d.json", "cocoid", "imgid"), fast=True),
    Case("refs-entry-without-sentences", "references", lambda c, d: ev(res(c, d), refs(c, d, first(
        c, lambda im: im.pop("sentences"))), d), 2, ("d.json", "\"sentences\"", "no such key"), fast=True),
    Case("refs-sentence-without-raw", "references", lambda c, d: ev(res(c, d), refs(c, d, first(
        c, lambda im: im["sentences"].__setitem__(0, {"text": "x"}))), d), 2, ("d.json", "sentences[0]", "raw")),
    Case("refs-sentence-raw-number", "references", lambda c, d: ev(res(c, d), refs(c, d, first(
        c, lambda im: im["sentences"][0].update(raw=5, tokens=5))), d), 2, ("d.json", "sentences[0]")),
    Case("refs-split-not-text", "references", lambda c, d: ev(res(c, d), refs(c, d, first(
        c, lambda im: im.update(split=3))), d), 2, ("d.json", "\"split\"")),
    Case("refs-duplicate-ids", "references", lambda c, d: ev(res(c, d), refs(c, d, lambda x: x["images"][1].update(
        cocoid=x["images"][0]["cocoid"])), d), 2, ("d.json", "more than once")),
    Case("refs-split-missing", "references", lambda c, d: ev(res(c, d), refs(c, d, lambda x: [
        im.update(split="train") for im in x["images"]]), d), 2, ("'test'", "train")),
    Case("refs-no-captions", "references", lambda c, d: ev(res(c, d), refs(c, d, lambda x: [
        im.update(sentences=[]) for im in x["images"]]), d), 2, ("reference caption",)),
    Case("refs-caption-without-word", "references", lambda c, d: ev(res(c, d), refs(c, d, first(
        c, lambda im: im["sentences"][0].update(raw=" ... "))), d), 2, ("no word",)),
    Case("refs-prepare-agrees-caption-without-word", "references", lambda c, d: _prep(d, refs(c, d, first(
        c, lambda im: im["sentences"][0].update(raw=" ... ")))), 2, ("no word",)),
    Case("refs-prepare-agrees-entry-without-sentences", "references", lambda c, d: _prep(d, refs(c, d, first(
        c, lambda im: im.pop("sentences")))), 2, ("d.json", "\"sentences\"", "no such key")),
    Case("refs-train-agrees-duplicate-ids", "references", lambda c, d: validate(c, d, **{"data.dataset": refs(
        c, d, lambda x: x["images"][1].update(cocoid=x["images"][0]["cocoid"]))}), 2, ("d.json", "more than once")),
    Case("refs-coco-missing-caption", "references", lambda c, d: ev(res(c, d, [{"image_id": 1, "caption": "a"}]), write(
        d / "c.json", {"annotations": [{"image_id": 1}]}), d, split=None), 2,
         ("c.json", "annotations[0]", "\"caption\"")),
    Case("refs-coco-caption-number", "references", lambda c, d: ev(res(c, d, [{"image_id": 1, "caption": "a"}]), write(
        d / "c.json", {"annotations": [{"image_id": 1, "caption": 5}]}), d, split=None), 2,
         ("c.json", "annotations[0]", "found int")),
    Case("refs-coco-id-boolean", "references", lambda c, d: ev(res(c, d, [{"image_id": 1, "caption": "a"}]), write(
        d / "c.json", {"annotations": [{"image_id": True, "caption": "a"}]}), d, split=None), 2,
         ("c.json", "\"image_id\"")),
    Case("refs-coco-with-split", "references", lambda c, d: ev(res(c, d, [{"image_id": 1, "caption": "a"}]), write(
        d / "c.json", {"annotations": [{"image_id": 1, "caption": "a"}]}), d), 2, ("--split",)),
    Case("refs-karpathy-without-split", "references", lambda c, d: ev(res(c, d), c.world.dataset, d, split=None), 2,
         ("--split",)),
    Case("refs-report-agrees", "references", lambda c, d: ["report", c.results, c.results_b, "--refs", refs(
        c, d, first(c, lambda im: im.pop("sentences"))), "--split", "test", "--out", d / "r.html"], 2,
         ("d.json", "\"sentences\"")),
    # ---------------------------------------------------------------- result files
    Case("results-not-json", "results", lambda c, d: ev(write(d / "r.json", "[{oops"), c.world.dataset, d), 2,
         ("r.json", "not valid JSON"), fast=True),
    Case("results-empty-file", "results", lambda c, d: ev(write(d / "r.json", ""), c.world.dataset, d), 2, ("r.json",)),
    Case("results-a-dict", "results", lambda c, d: ev(write(d / "r.json", {"image_id": 1}), c.world.dataset, d), 2,
         ("JSON list",)),
    Case("results-empty-list", "results", lambda c, d: ev(res(c, d, []), c.world.dataset, d), 2, ("empty",)),
    Case("results-missing-caption", "results", lambda c, d: ev(res(c, d, [{"image_id": IDS(c)[0]}]), c.world.dataset,
                                                               d), 2, ("entry 0", "'caption'")),
    Case("results-caption-number", "results", lambda c, d: ev(res(c, d, [{"image_id": IDS(c)[0], "caption": 7}]),
                                                              c.world.dataset, d), 2, ("caption must be a string",)),
    Case("results-id-float", "results", lambda c, d: ev(res(c, d, [{"image_id": 1.5, "caption": "a"}]),
                                                        c.world.dataset, d), 2, ("image_id",)),
    Case("results-unknown-images", "results", lambda c, d: ev(res(c, d, [{"image_id": 99999, "caption": "a"}]),
                                                              c.world.dataset, d), 2, ("99999",)),
    Case("results-string-ids", "results", lambda c, d: ev(res(c, d, [{"image_id": str(IDS(c)[0]), "caption": "a"}]),
                                                          c.world.dataset, d), 2, ("string ids",)),
    Case("results-duplicate-ids", "results", lambda c, d: ev(res(c, d, [{"image_id": IDS(c)[0], "caption": "x"},
                                                                        {"image_id": IDS(c)[0], "caption": "y"}]),
                                                             c.world.dataset, d), 2, ("duplicate image ids",)),
    Case("results-not-utf8", "results", lambda c, d: ev(write(d / "r.json", b'[{"image_id": 1, "caption": "caf\xe9"}]'),
                                                        c.world.dataset, d), 2, ("UTF-8",)),
    Case("results-missing-file", "results", lambda c, d: ev(d / "nope.json", c.world.dataset, d), 2, ("nope.json",)),
    Case("results-empty-caption-accepted", "results", lambda c, d: ev(res(c, d, [{"image_id": IDS(c)[0], "caption": ""}]),
                                                                      c.world.dataset, d), 0),
    Case("results-compare-different-images", "results", lambda c, d: [
        "compare", c.results, res(c, d, [{"image_id": IDS(c)[0], "caption": "a"}]), "--refs", c.world.dataset,
        "--split", "test", "--metrics", "bleu"], 2, ("different images",)),
    Case("results-unknown-metric", "results", lambda c, d: ev(res(c, d), c.world.dataset, d, "--metrics", "bleu,nope"), 2,
         ("'nope'",)),
    # ---------------------------------------------------------------- importers
    Case("import-f8k-line-without-tab", "importers", lambda c, d: imp_f8k(d, "1000268201_693b08cb0e.jpg#0 no tab\n"), 2,
         ("tok.txt",)),
    Case("import-f8k-caption-twice", "importers", lambda c, d: imp_f8k(d, TOKENS + TOKENS.splitlines(True)[0]), 2,
         ("tok.txt", "twice")),
    Case("import-f8k-not-utf8", "importers", lambda c, d: imp_f8k(d, b"1000268201_693b08cb0e.jpg#0\tcaf\xe9\n"), 2,
         ("tok.txt", "UTF-8")),
    Case("import-f8k-image-in-two-splits", "importers", lambda c, d: imp_f8k(d, TOKENS, val_list=(
        "1000268201_693b08cb0e.jpg\n")), 2, ("1000268201",)),
    Case("import-f8k-tokens-missing", "importers", lambda c, d: ["import", "flickr8k", "--tokens", d / "t.txt", "--train",
                                                                write(d / "a", "x\n"), "--val", write(d / "b", "y\n"),
                                                                "--out", d / "o.json"], 2, ("t.txt",)),
    Case("import-f8k-accepted", "importers", lambda c, d: imp_f8k(d, TOKENS), 0),
    Case("import-coco-not-json", "importers", lambda c, d: imp_coco(d, "{"), 2, ("captions.json", "JSON")),
    Case("import-coco-annotation-without-caption", "importers", lambda c, d: imp_coco(d, coco_with(
        annotations=[{"image_id": 1}])), 2, ("captions.json", "annotations[0]", "\"caption\""), fast=True),
    Case("import-coco-id-text", "importers", lambda c, d: imp_coco(d, coco_with(
        annotations=[{"image_id": "1", "caption": "a"}])), 2, ("annotations[0]", "integer")),
    Case("import-coco-image-without-name", "importers", lambda c, d: imp_coco(d, coco_with(images=[{"id": 1}])), 2,
         ("images[0]", "file_name")),
    Case("import-coco-bad-split-list", "importers", lambda c, d: imp_coco(d, COCO, "--split-list", "val"), 2,
         ("SPLIT=FILE",)),
    Case("import-coco-accepted", "importers", lambda c, d: imp_coco(d, COCO), 0),
    Case("import-features-tsv-garbage", "importers", lambda c, d: ["import", "features", "--format", "tsv", "--source",
                                                                   write(d / "f.tsv", "1\t2\n"), "--out", d / "o.h5"], 2,
         ("f.tsv",)),
    Case("import-features-npy-empty-folder", "importers", lambda c, d: ["import", "features", "--format", "npy",
                                                                        "--source", (d / "n").mkdir() or d / "n",
                                                                        "--out", d / "o.h5"], 2, ("n",)),
    Case("import-features-npy-wrong-ndim", "importers", lambda c, d: ["import", "features", "--format", "npy", "--source",
                                                                      _npy(d, (3,)), "--out", d / "o.h5"], 2, ("1",)),
    Case("import-features-npy-nan", "importers", lambda c, d: ["import", "features", "--format", "npy", "--source",
                                                               _npy(d, (3, 4), nan=True), "--out", d / "o.h5"], 2,
         ("NaN",)),
    Case("import-features-m2-not-hdf5", "importers", lambda c, d: ["import", "features", "--format", "m2", "--source",
                                                                   write(d / "m2.hdf5", "x"), "--out", d / "o.h5"], 2,
         ("m2.hdf5",)),
    Case("import-features-npy-pickle-refused", "importers", lambda c, d: ["import", "features", "--format", "npy",
                                                                          "--source", _npy(d, None), "--out",
                                                                          d / "o.h5"], 2, ("1",)),
    # ---------------------------------------------------------------- numbers on the command line
    Case("flag-length-penalty-nan", "numbers", lambda c, d: ["caption", "--checkpoint", c.ckpt, "--length-penalty",
                                                             "nan", "1"], 2, ("--length-penalty", "finite"), fast=True),
    Case("flag-lr-inf", "numbers", lambda c, d: ["vqa", "train", "--checkpoint", c.ckpt, "--out", d / "v", "--lr", "inf"],
         2, ("--lr", "finite")),
    Case("flag-timeout-inf", "numbers", lambda c, d: ["serve", "--checkpoint", c.ckpt, "--timeout", "inf"], 2,
         ("--timeout", "finite")),
    Case("flag-max-mb-nan", "numbers", lambda c, d: ["zoo", "build", "x", "--from", c.ckpt, "--zoo", d / "z",
                                                     "--max-mb", "nan"], 2, ("--max-mb", "finite")),
    Case("flag-batch-size-zero", "numbers", lambda c, d: ["caption", "--checkpoint", c.ckpt, "--batch-size", "0", "1"],
         2, ("--batch-size",)),
    Case("flag-limit-zero", "numbers", lambda c, d: ["extract", "--images", d, "--out", d / "o.h5", "--limit", "0"], 2,
         ("--limit",)),
    Case("flag-resamples-zero", "numbers", lambda c, d: ["report", c.results, c.results_b, "--refs", c.world.dataset,
                                                         "--split", "test", "--resamples", "0", "--out", d / "r.html"],
         2, ("--resamples",)),
    Case("flag-shard-out-of-range", "numbers", lambda c, d: ["caption", "--checkpoint", c.ckpt, "--shard", "4/4", "--out",
                                                             d / "c.jsonl", "1"], 2, ("4/4",)),
    # ---------------------------------------------------------------- permissions
    Case("perm-results-unreadable", "permissions", lambda c, d: ev(_private(res(c, d)), c.world.dataset, d), 2,
         ("r.json", "ermission"), unprivileged=True),
    Case("perm-output-folder-read-only", "permissions", lambda c, d: [
        "evaluate", "--results", res(c, d), "--refs", c.world.dataset, "--split", "test", "--metrics", "bleu",
        "--output", _read_only(d / "ro") / "s.json", "--quiet"], 2, ("ro", "ermission"), unprivileged=True),
    Case("perm-extract-out-read-only", "permissions", lambda c, d: ["extract", "--images", photos(
        d, {"a.jpg": jpeg_bytes()}), "--out", _read_only(d / "ro") / "o.h5", "--workers", "0", "--quiet"], 2,
         ("ro", "ermission"), unprivileged=True),
    Case("perm-prepare-out-read-only", "permissions", lambda c, d: ["prepare", "--dataset", c.world.dataset, "--out",
                                                                    _read_only(d / "ro") / "p"], 2,
         ("ro", "ermission"), unprivileged=True),
    Case("perm-train-out-read-only", "permissions", lambda c, d: ["train", *tiny(c.world, _read_only(d / "ro") / "run")],
         2, ("ro", "ermission"), unprivileged=True),
    Case("perm-checkpoint-unreadable", "permissions", lambda c, d: evck(ck(c, d, lambda o: _private(
        o / "model.safetensors")), d), 2, ("model.safetensors", "ermission"), unprivileged=True),
    Case("perm-disk-full-evaluate", "permissions", lambda c, d: ev(res(c, d), c.world.dataset, d), 1,
         ("File too large", "intact"), fsize=64),
    Case("perm-disk-full-extract", "permissions", lambda c, d: ex(photos(d, {f"{i}.jpg": jpeg_bytes() for i in range(3)}),
                                                                  d), 1, ("File too large",), fsize=4096),
    # ---------------------------------------------------------------- interrupted runs
    Case("killed-extract-resumes", "interrupted runs", _killed_extract, 0, may_change=("out.h5.partial",)),
    Case("killed-training-resumes", "interrupted runs", _killed_training, 0, may_change=("run/",)),
    Case("caption-partial-of-other-settings", "interrupted runs", _partial_caption, 2, ("other settings", "--restart")),
    Case("extract-partial-garbage", "interrupted runs", lambda c, d: [write(d / "out.h5.partial", "junk")] and ex(
        photos(d, {"a.jpg": jpeg_bytes()}), d), 2, ("out.h5", "--restart")),
    Case("resume-without-checkpoint", "interrupted runs", lambda c, d: [*train(c, d), "--resume"], 0),
    Case("plot-log-torn-last-line", "interrupted runs", lambda c, d: ["plot-log", _log(
        d, c, lambda lines: "".join(lines) + '{"kind": "train", "st')], 1, ("cut short", "incomplete", "left as it was"),
         fast=True),
    # ---------------------------------------------------------------- derived outputs
    Case("plot-log-damaged-line", "derived outputs", lambda c, d: ["plot-log", _log(
        d, c, lambda lines: "".join(lines[:1] + ["{oops\n"] + lines[1:]))], 1, ("line 2", "not a JSON record"),
         fast=True),
    Case("plot-log-record-not-object", "derived outputs", lambda c, d: ["plot-log", _log(
        d, c, lambda lines: "".join(["[1, 2]\n"] + lines))], 1, ("line 1", "JSON object")),
    Case("plot-log-record-without-step", "derived outputs", lambda c, d: ["plot-log", _log(
        d, c, lambda lines: "".join(lines + ['{"kind": "train", "loss": 1.0}\n']))], 1, ("\"step\"",)),
    Case("plot-log-loss-not-a-number", "derived outputs", lambda c, d: ["plot-log", _log(
        d, c, lambda lines: "".join(lines + ['{"kind": "train", "step": 99, "loss": "high"}\n']))], 1, ("'loss'",)),
    Case("plot-log-nothing-good", "derived outputs", lambda c, d: ["plot-log", _log(d, c, lambda lines: "{\n[]\n")], 2,
         ("no well-formed records",)),
    Case("report-results-of-other-images", "derived outputs", lambda c, d: [write(d / "r.html", "earlier report")] and [
        "report", c.results, res(c, d, [{"image_id": IDS(c)[0], "caption": "a"}]), "--refs", c.world.dataset, "--split",
        "test", "--out", d / "r.html"], 2, ("different images",)),
    Case("report-missing-images", "derived outputs", lambda c, d: [
        "report", c.results, c.results_b, "--refs", c.world.dataset, "--split", "test", "--images", d, "--out",
        d / "r.html"], 2, ("image(s) are not in",)),
    Case("export-votes-of-another-rater", "derived outputs", _votes_of_another_study, 2,
         ("votes.sqlite", "'zz'", "nothing was exported")),
    Case("export-votes-unknown-item", "derived outputs", lambda c, d: [_export_before(d, c)] and [
        "human-eval", "export", _study(d, c, votes=[("r1", 99, "relevance", "A", "A", "t")]), "--out", d / "out"], 2,
         ("item 99",)),
    Case("export-votes-unknown-criterion", "derived outputs", lambda c, d: [
        "human-eval", "export", _study(d, c, votes=[("r1", 0, "beauty", "A", "A", "t")]), "--out", d / "out"], 2,
         ("'beauty'",)),
    Case("export-votes-not-a-database", "derived outputs", _study_votes_garbage, 2, ("votes.sqlite",)),
    Case("export-manifest-items-removed", "derived outputs", lambda c, d: [
        "human-eval", "export", _study(d, c, lambda m: m.pop("items")), "--out", d / "out"], 2,
         ("study.json", "items")),
    Case("export-manifest-rater-broken", "derived outputs", lambda c, d: [
        "human-eval", "export", _study(d, c, lambda m: m["raters"][0].pop("a_left")), "--out", d / "out"], 2,
         ("study.json", "raters[0]")),
    Case("export-accepted", "derived outputs", lambda c, d: ["human-eval", "export", _study(d, c, votes=[VOTE]), "--out",
                                                             d / "out"], 0),
]


def _npy(d: Path, shape, nan=False) -> Path:
    import numpy as np

    folder = d / "npy"
    folder.mkdir(exist_ok=True)
    if shape is None:  # an object array: only readable by unpickling
        np.save(folder / "1.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
        return folder
    data = np.ones(shape, np.float32)
    if nan:
        data[0, 0] = np.nan
    np.save(folder / "1.npy", data)
    return folder


def _private(path: Path) -> Path:
    os.chmod(path, 0o000)  # the case runs without root's overrides: nobody may read this
    return path


def _read_only(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o555)
    return folder
