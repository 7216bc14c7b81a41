"""The bad-input catalogue's cases for the commands' options (see bad_input_cases.py): generation
settings, ensembles, --refs, --images and the model presets, in the classes of the other case
files; and, generated from the CLI's declared path roles, output paths (every output option given
the path of an input)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bad_input_cases import TESTS, Case, cap, ck, ev, first, photos, refs, res, train
from bad_input_context import CONFIGS, flip_byte, jpeg_bytes, write


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    return Path(shutil.copytree(src, dst))



def output_path_cases() -> list[Case]:
    """Every output option of every command given the path of each of its input options (an
    existing file), generated from the declared path roles: refused, the input unchanged."""
    sys.path.insert(0, str(TESTS / "reliability"))
    from cli_table import argv, commands, value_for

    from catcap.cli import paths

    cases = []
    for command in commands():
        for out in command.with_role("writes"):
            for inp in command.with_role("reads"):
                if out is inp:
                    continue
                def make(c, d, command=command, out=out, inp=inp):
                    shared = write(d / "input.json", {"precious": True})
                    return argv(command, d, {out: value_for(out, str(shared)), inp: value_for(inp, str(shared))})
                cases.append(Case(f"same-path {command.name} {paths.label(out)}={paths.label(inp)}", "output paths",
                                  make, 2, ("write over its own input", paths.label(out), paths.label(inp)),
                                  fast=(command.name, paths.label(inp)) in (("evaluate", "--results"), ("plot-log", "RUN"))))
    for how, other in (("symlink", lambda d: (d / "link.json").symlink_to(d / "r.json") or d / "link.json"),
                       ("dotdot", lambda d: (d / "sub").mkdir() or d / "sub" / ".." / "r.json"),
                       ("hardlink", lambda d: os.link(d / "r.json", d / "hard.json") or d / "hard.json")):
        cases.append(Case(f"same-file-by-{how}", "output paths", lambda c, d, other=other: [
            "evaluate", "--results", res(c, d), "--refs", c.world.dataset, "--split", "test", "--output", other(d)], 2,
            ("write over its own input",)))
    def relative_data(c, d):  # the model's training files under the names it recorded, in the case's folder
        import shutil

        model = c.relative_model
        shutil.copytree(model.parents[1] / "data", d / "data")
        return model
    cases.append(Case("evaluate-save-results-over-the-models-dataset", "output paths", lambda c, d: [
        "evaluate", "--checkpoint", relative_data(c, d), "--split", "test", "--quiet", "--save-results",
        d / "data" / "dataset.json"], 2, ("write over its own input", "--save-results", "--refs (not given")))
    cases.append(Case("caption-out-over-the-models-features", "output paths", lambda c, d: [
        "caption", "--checkpoint", relative_data(c, d), "--quiet", "--out", "data/features.h5", "1"], 2,
        ("write over its own input", "--out", "--features (not given")))
    cases.append(Case("caption-out-into-an-ensemble-member", "output paths", lambda c, d: [
        "caption", "--checkpoint", f"{c.ckpt},{_copy(c.ckpt, d / 'm')}", "--out", d / "m" / "config.json", "--restart",
        "1"], 2, ("write over its own input", "--out", "--checkpoint")))
    cases.append(Case("train-out-dir-holds-init-from", "output paths", lambda c, d: train(
        c, d, **{"train.init_from": _copy(c.ckpt, d / "run" / "best")}), 2, ("out_dir", "train.init_from")))
    cases.append(Case("vqa-train-out-holds-checkpoint", "output paths", lambda c, d: [
        "vqa", "train", "--checkpoint", _copy(c.ckpt, d / "v" / "best"), "--out", d / "v" / "sub" / ".."], 2,
        ("--out", "--checkpoint")))
    return cases


def gen(c, *flags, command="caption"):
    """A feature model's caption of store key 1 (or its evaluation on the test split) with
    generation flags."""
    if command == "caption":
        return ["caption", "--checkpoint", c.ckpt, "--max-len", "5", "--quiet", *flags, "1"]
    return ["evaluate", "--checkpoint", c.ckpt, "--split", "test", "--metrics", "bleu", "--quiet", *flags]


def _photo(c):
    return sorted(c.photos.glob("*.jpg"))[0]


def _split_photos(c, d, broken=None):
    """A folder with the photo model's val photos (``broken``: one of them replaced by text)."""
    import shutil

    folder = d / "val_photos"
    folder.mkdir()
    for p in sorted(c.photos.glob("*.jpg"))[4:]:
        shutil.copy(p, folder / p.name)
        if broken == p.name or broken == "first" and p == sorted(c.photos.glob("*.jpg"))[4]:
            (folder / p.name).write_text("not a photo")
    return folder


def evimg(c, d, images, *extra):
    return ["evaluate", "--checkpoint", c.photo_model, "--images", images, "--split", "val", "--metrics", "bleu",
            "--output", d / "scores.json", "--quiet", "--beam", "1", "--max-len", "5", *extra]


OPTION_CASES: list[Case] = [
    # ---------------------------------------------------------------- generation settings (numbers)
    Case("gen-temperature-nan", "numbers", lambda c, d: gen(c, "--do-sample", "--temperature", "nan"), 2,
         ("--temperature", "finite"), fast=True),
    Case("gen-top-p-inf", "numbers", lambda c, d: gen(c, "--do-sample", "--top-p", "inf"), 2, ("--top-p", "finite")),
    Case("gen-diversity-penalty-minus-inf", "numbers", lambda c, d: gen(
        c, "--beam", "4", "--num-beam-groups", "2", "--diversity-penalty=-inf", command="evaluate"), 2,
         ("--diversity-penalty", "finite")),
    Case("gen-top-p-above-one", "numbers", lambda c, d: gen(c, "--do-sample", "--top-p", "1.5"), 2,
         ("--top-p", "(0, 1]", "1.5")),
    Case("gen-temperature-zero", "numbers", lambda c, d: gen(c, "--do-sample", "--temperature", "0"), 2,
         ("--temperature", "> 0")),
    Case("gen-groups-not-a-divisor", "numbers", lambda c, d: gen(c, "--beam", "3", "--num-beam-groups", "2",
                                                                 "--diversity-penalty", "0.5"), 2,
         ("--num-beam-groups", "divisor")),
    Case("gen-groups-without-penalty", "numbers", lambda c, d: gen(c, "--beam", "4", "--num-beam-groups", "2"), 2,
         ("--diversity-penalty",)),
    Case("gen-penalty-without-groups", "numbers", lambda c, d: gen(c, "--diversity-penalty", "0.5"), 2,
         ("--diversity-penalty", "num_beam_groups")),
    Case("gen-sample-with-beams", "numbers", lambda c, d: gen(c, "--do-sample", "--beam", "3"), 2,
         ("--beam", "do_sample")),
    Case("gen-top-k-without-sampling", "numbers", lambda c, d: gen(c, "--top-k", "5"), 2, ("--top-k", "do_sample")),
    Case("gen-min-above-max", "numbers", lambda c, d: gen(c, "--min-len", "9"), 2, ("--min-len", "max_length=5")),
    Case("gen-flags-without-checkpoint", "numbers", lambda c, d: ev(res(c, d), c.world.dataset, d, "--temperature",
                                                                    "0.5"), 2, ("--temperature", "--checkpoint")),
    Case("gen-sampling-accepted", "numbers", lambda c, d: gen(c, "--do-sample", "--temperature", "0.7", "--top-p",
                                                              "0.9", "--seed", "1"), 0),
    Case("gen-diverse-beam-accepted", "numbers", lambda c, d: gen(c, "--beam", "4", "--num-beam-groups", "2",
                                                                  "--diversity-penalty", "0.5"), 0),
    # ---------------------------------------------------------------- ensembles (checkpoints)
    Case("ensemble-member-missing", "checkpoints", lambda c, d: ["caption", "--checkpoint", f"{c.ckpt},{d / 'nope'}",
                                                                 "1"], 2, ("nope", "does not exist"), fast=True),
    Case("ensemble-no-model", "checkpoints", lambda c, d: ["caption", "--checkpoint", ",", "1"], 2,
         ("--checkpoint", "','")),
    Case("ensemble-member-run-folder", "checkpoints", lambda c, d: [
        "evaluate", "--checkpoint", c.ckpt, "--checkpoint", c.run, "--split", "test", "--quiet"], 2,
         ("training run's folder", "last")),
    Case("ensemble-member-bit-flip", "checkpoints", lambda c, d: [
        "evaluate", "--checkpoint", c.ckpt, "--checkpoint", ck(c, d, lambda o: flip_byte(o / "model.safetensors")),
        "--split", "test", "--quiet"], 2, ("model.safetensors", "sha256")),
    Case("ensemble-other-vocabulary", "checkpoints", lambda c, d: [
        "caption", "--checkpoint", f"{c.ckpt},{c.photo_model}", "1"], 2, ("vocab",)),
    Case("ensemble-accepted", "checkpoints", lambda c, d: [
        "evaluate", "--checkpoint", f"{c.ckpt},{c.lstm}", "--split", "test", "--metrics", "bleu", "--quiet",
        "--max-len", "5"], 0),
    # ---------------------------------------------------------------- caption --refs, evaluate --checkpoint --refs
    Case("refs-caption-not-json", "references", lambda c, d: cap(c, _photo(c), extra=(
        "--refs", write(d / "d.json", "{"), "--json")), 2, ("d.json", "JSON")),
    Case("refs-caption-missing", "references", lambda c, d: cap(c, _photo(c), extra=("--refs", d / "nope.json")), 2,
         ("nope.json",)),
    Case("refs-caption-entry-without-filename", "references", lambda c, d: cap(c, _photo(c), extra=(
        "--refs", refs(c, d, first(c, lambda im: im.pop("filename"))), "--json")), 2, ("d.json", "filename")),
    Case("refs-caption-neither-format", "references", lambda c, d: cap(c, _photo(c), extra=(
        "--refs", write(d / "d.json", [1, 2]), "--json")), 2, ("d.json",)),
    Case("refs-evaluate-checkpoint-entry-without-sentences", "references", lambda c, d: [
        "evaluate", "--checkpoint", c.ckpt, "--refs", refs(c, d, first(c, lambda im: im.pop("sentences"))),
        "--split", "test", "--quiet"], 2, ("d.json", "sentences")),
    # ---------------------------------------------------------------- evaluate --images
    Case("image-evaluate-images-missing", "images", lambda c, d: evimg(c, d, d / "nowhere"), 2, ("nowhere",)),
    Case("image-evaluate-images-a-file", "images", lambda c, d: evimg(c, d, write(d / "a.jpg", jpeg_bytes())), 2,
         ("a.jpg",)),
    Case("image-evaluate-images-without-the-split", "images", lambda c, d: evimg(
        c, d, photos(d, {"other.jpg": jpeg_bytes()})), 2, ("photos",)),
    Case("image-evaluate-images-one-unreadable", "images", lambda c, d: evimg(c, d, _split_photos(c, d, "first")), 2,
         ("val_photos",)),
    Case("image-evaluate-images-feature-model", "images", lambda c, d: [
        "evaluate", "--checkpoint", c.ckpt, "--images", c.photos, "--split", "test", "--quiet"], 2, ("--images",),
         fast=True),
    Case("image-evaluate-images-accepted", "images", lambda c, d: evimg(c, d, _split_photos(c, d)), 0,
         may_change=("scores.json",)),
    # ---------------------------------------------------------------- presets (configs)
    Case("config-preset-unknown-key", "configs", lambda c, d: [
        "validate-config", "--config", CONFIGS / "models" / "m2_official.yaml", "--no-data", "model.memory_slot=4"], 2,
         ("memory_slot", "memory_slots")),
    Case("config-preset-nan", "configs", lambda c, d: [
        "validate-config", "--config", CONFIGS / "models" / "updown.yaml", "--no-data", "model.dropout=.nan"], 2,
         ("model.dropout", "finite")),
    Case("config-train-without-config-or-data", "configs", lambda c, d: ["train", f"out_dir={d / 'run'}"], 2,
         ("--config", "data.dataset")),
]

OPTION_CASES += output_path_cases()
