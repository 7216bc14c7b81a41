"""The cases of the bad-input catalogue (benchmarks/bad_inputs.py), by class. Each case makes its
input in its own folder (the run's working folder) from the shared inputs of bad_input_context.py
and gives the command line; ``expect`` is the exit status a careful user should get (2: refused,
nothing written; 1: some inputs failed, the rest done and the failures listed; 0: accepted) and
``words`` what the message must name (the file, the entry, the key, the option). The runner
judges each outcome from what the command did; nothing here states an outcome but the expectation.
The output-path class is generated from the CLI's declared path roles (every output option of
every command given the path of each of its input options), like tests/reliability/test_path_roles.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bad_input_context import (Context, cut, edited_json, flip_byte, huge_jpeg, jpeg_bytes, png16, png_header_only,
                               replace_regions, store_copy, tiny, write)

TESTS = Path(__file__).resolve().parents[1] / "tests"


@dataclass
class Case:
    id: str
    cls: str
    make: Callable[[Context, Path], list]  # (shared inputs, the case's folder) -> argv after "catcap"
    expect: int
    words: tuple = ()  # the message (stderr) must contain each
    may_change: tuple = ()  # files of the case's folder the run may change or create (a store it continues, the
    # list of failures; "dir/" for a folder)
    unprivileged: bool = False  # permission cases: run without root's right to ignore file modes
    fsize: int | None = None  # RLIMIT_FSIZE of the run, bytes (a disk that fills up)
    fast: bool = False  # in the normal test suite's subset (tests/reliability/test_bad_input_catalogue.py)


def ev(results, refs, d, *extra, split="test"):
    return ["evaluate", "--results", results, "--refs", refs, *(["--split", split] if split else []),
            "--metrics", "bleu,cider", "--output", d / "scores.json", "--quiet", *extra]


def res(c: Context, d: Path, entries=None, name="r.json"):
    entries = [{"image_id": i, "caption": "a red circle"} for i in c.test_ids] if entries is None else entries
    return write(d / name, entries)


def refs(c: Context, d: Path, change, name="d.json"):
    return edited_json(c.world.dataset, d / name, change)


def first(c, key):
    """Edit the first test image of a Karpathy dict."""
    def change(data):
        im = next(i for i in data["images"] if i["split"] == "test")
        key(im)
    return change


def validate(c: Context, d: Path, **overrides):
    return ["validate-config", *tiny(c.world, d / "run", **overrides)]


def train(c: Context, d: Path, **overrides):
    return ["train", *tiny(c.world, d / "run", **overrides)]


def ck(c: Context, d: Path, change=None) -> Path:
    import shutil

    out = Path(shutil.copytree(c.ckpt, d / "ckpt"))
    if change:
        change(out)
    return out


def ck_config(change):
    def edit(out):
        edited_json(out / "config.json", out / "config.json", change)
    return edit


def evck(path, d, *extra):
    return ["evaluate", "--checkpoint", path, "--split", "test", "--metrics", "bleu", "--output", d / "scores.json",
            "--quiet", *extra]


def photos(d: Path, files: dict[str, bytes]) -> Path:
    folder = d / "photos"
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def ex(folder, d, *extra):
    return ["extract", "--images", folder, "--out", d / "out.h5", "--workers", "0", "--quiet", *extra]


def cap(c: Context, *images, extra=()):
    return ["caption", "--checkpoint", c.photo_model, "--beam", "1", "--max-len", "5", "--workers", "0",
            "--device", "cpu", "--quiet", *extra, *images]


def feats(c: Context, d: Path, change, name="f.h5"):
    return store_copy(c.world.features, d / name, change)


def _regions(c: Context, d: Path, values) -> Path:
    """A copy of the world's store with every image's regions replaced by ``values(regions)``."""
    import shutil

    return replace_regions(Path(shutil.copy(c.world.features, d / "f.h5")), values)


def _nan(r):
    r = r.copy()
    r[0, 0] = float("nan")
    return r


def _inf(r):
    r = r.copy()
    r[0, 0] = float("inf")
    return r


def _flip_each(f):
    for key in f["images"]:  # every image: the run reads some
        data = f["images"][key]["regions"][()]
        data[0, 0] += 1.0
        del f["images"][key]["regions"]
        f["images"][key].create_dataset("regions", data=data)  # the sha256 attribute is kept: it no longer matches


def _set_attr(name, value):
    def change(f):
        f.attrs[name] = value
    return change


def _del(name):
    def change(f):
        del f[name]
    return change


def _log(d: Path, c: Context, edit) -> Path:
    """A copy of the run folder whose log.jsonl is changed by ``edit(lines) -> text``."""
    import shutil

    run = Path(shutil.copytree(c.run, d / "run", ignore=shutil.ignore_patterns("last", "best")))
    lines = (run / "log.jsonl").read_text().splitlines(keepends=True)
    (run / "log.jsonl").write_text(edit(lines))
    return run


def _study(d: Path, c: Context, change=None, votes=()) -> Path:
    import shutil
    import sqlite3

    study = Path(shutil.copytree(c.study, d / "study"))
    if change:
        edited_json(study / "study.json", study / "study.json", change)
    if votes:  # inserted, committed and closed: the WAL is folded into the file, as after a server stops
        db = sqlite3.connect(study / "votes.sqlite")
        with db:
            db.executemany("INSERT INTO votes VALUES (?, ?, ?, ?, ?, ?)", votes)
        db.close()
    return study


def _export_before(d: Path, c: Context) -> Path:
    """An earlier export in d/out (must be kept when a later export is refused)."""
    from catcap.web.human_eval.export import export_study

    export_study(c.study, d / "out")
    return d / "out"


IDS = lambda c: c.test_ids  # noqa: E731
ERRORS = ("out.h5.errors.txt",)  # catcap extract lists the images it could not read, also when none could be
VOTE = ("r1", 0, "relevance", "A", "A", "2024-01-01T00:00:00")


CASES: list[Case] = [
    # ---------------------------------------------------------------- images
    Case("image-corrupt-jpeg", "images", lambda c, d: ex(photos(d, {"1_a.jpg": b"\xff\xd8\xff garbage" * 9}), d), 2,
         ("could not be read", "1_a.jpg"), fast=True, may_change=ERRORS),
    Case("image-empty-file", "images", lambda c, d: ex(photos(d, {"1_a.png": b""}), d), 2, ("could not be read",),
         may_change=ERRORS),
    Case("image-truncated-jpeg", "images", lambda c, d: ex(photos(d, {"1_a.jpg": jpeg_bytes()[:200]}), d), 2,
         ("could not be read",), may_change=ERRORS),
    Case("image-bomb-png-header", "images", lambda c, d: ex(photos(d, {"1_a.png": png_header_only(40000, 40000)}), d),
         2, ("could not be read", "pixels"), may_change=ERRORS),
    Case("image-bomb-jpeg-header", "images", lambda c, d: ex(photos(d, {"1_a.jpg": huge_jpeg()}), d), 2,
         ("could not be read", "pixels"), may_change=ERRORS),
    Case("image-text-named-jpg", "images", lambda c, d: ex(photos(d, {"notes.jpg": b"just some text\n"}), d), 2,
         ("could not be read",), may_change=ERRORS),
    Case("image-one-bad-among-good", "images", lambda c, d: ex(photos(d, {"good.jpg": jpeg_bytes(), "bad.jpg": b"x"}),
                                                                d), 1, ("could not be read", "errors.txt")),
    Case("image-cmyk-accepted", "images", lambda c, d: ex(photos(d, {"cmyk.jpg": jpeg_bytes("CMYK")}), d), 0),
    Case("image-16bit-png-accepted", "images", lambda c, d: ex(photos(d, {"grey.png": png16()}), d), 0),
    Case("image-greyscale-accepted", "images", lambda c, d: ex(photos(d, {"grey.jpg": jpeg_bytes("L")}), d), 0),
    Case("image-folder-empty", "images", lambda c, d: ex(photos(d, {}), d), 2, ("no images",), fast=True),
    Case("image-folder-missing", "images", lambda c, d: ex(d / "nowhere", d), 2, ("nowhere", "does not exist"),
         fast=True),
    Case("image-folder-is-a-file", "images", lambda c, d: ex(write(d / "a.jpg", jpeg_bytes()), d), 2, ("a.jpg",)),
    Case("image-extract-out-not-h5", "images", lambda c, d: ["extract", "--images", photos(d, {"a.jpg": jpeg_bytes()}),
                                                              "--out", d / "out.txt", "--workers", "0"], 2, (".h5",)),
    Case("image-extract-dataset-missing-photos", "images", lambda c, d: ex(photos(d, {"a.jpg": jpeg_bytes()}), d,
                                                                             "--dataset", c.world.dataset), 2,
         ("of", "not")),
    Case("image-caption-one-unreadable", "images", lambda c, d: cap(c, write(d / "bad.jpg", b"no photo")), 2,
         ("cannot read", "bad.jpg")),
    Case("image-caption-one-bad-among-good", "images",
         lambda c, d: cap(c, write(d / "bad.jpg", b"no photo"), sorted(c.photos.glob("*.jpg"))[0]), 1,
         ("cannot read", "bad.jpg", "captioned 1 of 2")),
    Case("image-caption-out-all-unreadable", "images",
         lambda c, d: cap(c, write(d / "bad.jpg", b"no photo"), extra=("--out", d / "caps.jsonl")), 2,
         ("cannot read", "wrote nothing")),
    Case("image-caption-bomb", "images", lambda c, d: cap(c, write(d / "big.png", png_header_only(40000, 40000))), 2,
         ("cannot read", "big.png")),
    Case("image-caption-missing-file", "images", lambda c, d: cap(c, d / "nope.jpg"), 2, ("nope",)),
    Case("image-vqa-ask-unreadable-photo", "images",
         lambda c, d: ["vqa", "ask", "--model", c.vqa, "--image", write(d / "bad.jpg", b"no"), "is there a dog?"], 2,
         ("bad.jpg",)),
    Case("image-vqa-ask-bomb", "images",
         lambda c, d: ["vqa", "ask", "--model", c.vqa, "--image", write(d / "big.jpg", huge_jpeg()), "a dog?"], 2,
         ("big.jpg", "pixels")),
    # ---------------------------------------------------------------- feature stores
    Case("store-not-hdf5", "feature stores", lambda c, d: validate(c, d, **{"data.features": write(d / "f.h5", "txt")}),
         2, ("f.h5", "not an HDF5 file"), fast=True),
    Case("store-empty-file", "feature stores", lambda c, d: validate(c, d, **{"data.features": write(d / "f.h5", b"")}),
         2, ("f.h5",)),
    Case("store-missing", "feature stores", lambda c, d: validate(c, d, **{"data.features": d / "none.h5"}), 2,
         ("none.h5", "does not exist"), fast=True),
    Case("store-wrong-width", "feature stores", lambda c, d: validate(c, d, **{"model.feature_dim": 48}), 2,
         ("32", "model.feature_dim")),
    Case("store-nan", "feature stores", lambda c, d: train(c, d, **{"data.features": _regions(c, d, _nan)}),
         2, ("NaN",)),
    Case("store-inf", "feature stores", lambda c, d: train(c, d, **{"data.features": _regions(c, d, _inf)}),
         2, ("NaN/inf",)),
    Case("store-meta-not-json", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": feats(c, d, _set_attr("meta", "{broken"))}), 2,
         ("f.h5", "attribute meta", "JSON"), fast=True),
    Case("store-meta-not-object", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": feats(c, d, _set_attr("meta", "[1, 2]"))}), 2,
         ("f.h5", "attribute meta", "found list")),
    Case("store-dim-wrong-type", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": feats(c, d, _set_attr("feature_dim", "32"))}), 2,
         ("f.h5", "attribute feature_dim", "found str")),
    Case("store-format-missing", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": feats(c, d, _set_attr("format", "other"))}), 2,
         ("f.h5", "format")),
    Case("store-images-group-missing", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": feats(c, d, _del("images"))}), 2, ("f.h5", "/images")),
    Case("store-image-edited", "feature stores",
         lambda c, d: train(c, d, **{"data.features": feats(c, d, _flip_each)}), 2, ("f.h5", "sha256")),
    Case("store-cut-short", "feature stores", lambda c, d: train(c, d, **{"data.features": cut(
        feats(c, d, lambda f: None), 0.6)}), 2, ("f.h5",)),
    Case("store-npz-dir-without-meta", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": (d / "npz").mkdir() or d / "npz"}), 2, ("npz", "meta.json")),
    Case("store-npz-meta-broken", "feature stores",
         lambda c, d: validate(c, d, **{"data.features": write(d / "npz" / "meta.json", "{").parent}), 2,
         ("meta.json", "JSON")),
    Case("store-caption-features-not-hdf5", "feature stores",
         lambda c, d: ["caption", "--checkpoint", c.ckpt, "--features", write(d / "f.h5", "x"), "1"], 2, ("f.h5",)),
    Case("store-extract-resume-foreign-file", "feature stores",
         lambda c, d: [write(d / "out.h5", "not hdf5")] and ex(photos(d, {"a.jpg": jpeg_bytes()}), d), 2,
         ("out.h5", "--restart")),
    # ---------------------------------------------------------------- checkpoints
    Case("ckpt-missing", "checkpoints", lambda c, d: evck(d / "nope", d), 2, ("nope", "does not exist"), fast=True),
    Case("ckpt-run-folder", "checkpoints", lambda c, d: evck(c.run, d), 2, ("training run's folder", "last"),
         fast=True),
    Case("ckpt-empty-folder", "checkpoints", lambda c, d: evck((d / "e").mkdir() or d / "e", d), 2,
         ("missing", "config.json")),
    Case("ckpt-a-file", "checkpoints", lambda c, d: evck(write(d / "ckpt", "x"), d), 2, ("ckpt",)),
    Case("ckpt-weights-bit-flip", "checkpoints",
         lambda c, d: evck(ck(c, d, lambda o: flip_byte(o / "model.safetensors")), d), 2,
         ("model.safetensors", "sha256"), fast=True),
    Case("ckpt-weights-cut-short", "checkpoints", lambda c, d: evck(ck(c, d, lambda o: cut(o / "model.safetensors")),
                                                                    d), 2, ("model.safetensors", "damaged")),
    Case("ckpt-vocab-edited", "checkpoints", lambda c, d: evck(ck(c, d, lambda o: (o / "vocab.json").write_text(
        (o / "vocab.json").read_text().replace('"circle"', '"circus"', 1))), d), 2, ("vocab.json", "sha256")),
    Case("ckpt-vocab-cut-short", "checkpoints", lambda c, d: evck(ck(c, d, lambda o: cut(o / "vocab.json")), d), 2,
         ("vocab.json", "not readable JSON")),
    Case("ckpt-config-not-json", "checkpoints", lambda c, d: evck(ck(c, d, lambda o: write(o / "config.json", "{")),
                                                                  d), 2, ("config.json", "JSON")),
    Case("ckpt-config-other-format", "checkpoints", lambda c, d: evck(ck(c, d, ck_config(
        lambda m: m.update(format="something"))), d), 2, ("config.json", "format")),
    Case("ckpt-config-wrong-type", "checkpoints", lambda c, d: evck(ck(c, d, ck_config(
        lambda m: m["config"]["model"].update(d_model="big"))), d), 2,
         ("config.json", "model.d_model", "expected int", "'big'"), fast=True),
    Case("ckpt-config-impossible-value", "checkpoints", lambda c, d: evck(ck(c, d, ck_config(
        lambda m: m["config"]["model"].update(dropout=2.0))), d), 2, ("config.json", "model.dropout")),
    Case("ckpt-config-nan", "checkpoints", lambda c, d: evck(ck(c, d, lambda o: write(o / "config.json", (
        o / "config.json").read_text().replace('"label_smoothing": 0.0', '"label_smoothing": NaN'))), d), 2,
         ("config.json", "label_smoothing", "finite")),
    Case("ckpt-config-unknown-key", "checkpoints", lambda c, d: evck(ck(c, d, ck_config(
        lambda m: m["config"]["model"].update(d_modle=3))), d), 2, ("config.json", "d_modle")),
    Case("ckpt-config-edited-value", "checkpoints", lambda c, d: evck(ck(c, d, ck_config(
        lambda m: m["config"]["train"].update(seed=7))), d), 2, ("config.json", "sha256")),
    Case("ckpt-other-family-resume", "checkpoints", lambda c, d: [
        "train", *tiny(c.world, c.lstm.parent, **{"train.max_steps": 3}), "--resume"], 2,
         ("model.decoder is 'updown' in the checkpoint",)),
    Case("ckpt-other-family-init", "checkpoints", lambda c, d: train(c, d, **{"train.init_from": c.lstm}), 2,
         ("do not fit",)),
    Case("ckpt-caption-with-photo-of-feature-model", "checkpoints",
         lambda c, d: ["caption", "--checkpoint", c.ckpt, write(d / "x.jpg", jpeg_bytes())], 2, ("x",)),
    Case("ckpt-vqa-ask-with-a-caption-model", "checkpoints",
         lambda c, d: ["vqa", "ask", "--model", c.ckpt, "--image", "1", "what?"], 2, ("vqa",)),
    Case("ckpt-zoo-unknown-name", "checkpoints", lambda c, d: ["caption", "--checkpoint", "no-such-model", "1"], 2,
         ("no-such-model",)),
]
# the other classes: bad_input_cases_more.py; the commands' options and output paths: bad_input_cases_options.py
