"""The bad-input catalogue: one table, every case a clear error (or a correct acceptance) and
nothing lost.

Each row gives the input (a file made by the row, a command line or an API call), the exit
code (2: bad input, 0: accepted and handled right) or the exception class for API rows, words
the one-line message must contain (what was expected, what was found, what to do), and the
files that must not be created or changed. Oracle: the row's own statement of the input's
defect; for accepted inputs, the expected value computed in the row (e.g. the 16-bit grey
image's 8-bit scaling). Every CLI row also checks that stderr holds one line and no traceback."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from catcap.cli.main import main
from malformed import huge_jpeg, jpeg_bytes, png_header_only, replace_regions, write
from tiny_runs import tiny_run_overrides

# -- shared inputs, made once ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ctx(fault_world, tmp_path_factory):
    """The world, a trained tiny Transformer checkpoint and a tiny Up-Down one (another family)."""
    from catcap import api

    root = tmp_path_factory.mktemp("bad-inputs")
    quiet = {"log": lambda m: None}
    api.train(None, tiny_run_overrides(fault_world, root / "tf", **{"train.max_steps": 2, "train.epochs": 1}), **quiet)
    api.train(None, tiny_run_overrides(fault_world, root / "lstm", **{
        "train.max_steps": 1, "train.epochs": 1, "model.encoder": "embed", "model.decoder": "updown",
        "model.decoder_layers": 1, "model.rnn.word_dim": 16, "model.rnn.att_hidden": 16}), **quiet)
    data = json.loads(Path(fault_world.dataset).read_text())
    test_ids = [im["cocoid"] for im in data["images"] if im["split"] == "test"]
    return {"world": fault_world, "root": root, "ckpt": root / "tf" / "last", "lstm": root / "lstm" / "last",
            "data": data, "test_ids": test_ids}


def results_for(c, tmp, entries=None):
    entries = [{"image_id": i, "caption": "a red circle"} for i in c["test_ids"]] if entries is None else entries
    return write(tmp / "results.json", entries)


def dataset_with(c, tmp, change: Callable[[dict], None], name="dataset.json"):
    data = json.loads(json.dumps(c["data"]))
    change(data)
    return write(tmp / name, data)


def evaluate(results, refs, tmp, *extra):
    return ["evaluate", "--results", results, "--refs", refs, "--split", "test", "--metrics", "bleu,cider",
            "--output", tmp / "scores.json", "--quiet", *extra]


def train(c, tmp, *extra, **overrides):
    return ["train", *tiny_run_overrides(c["world"], tmp / "run", **{"train.max_steps": 1, "train.epochs": 1,
                                                                      **overrides}), *extra]


def validate(c, tmp, **overrides):
    return ["validate-config", *tiny_run_overrides(c["world"], tmp / "run", **overrides)]


def features_with(c, tmp, values: Callable[[np.ndarray], np.ndarray], name="features.h5"):
    """A copy of the world's store with one image's regions replaced (written with h5py, as a
    foreign tool would: catcap's own writer refuses such values)."""
    import shutil

    out = tmp / name
    shutil.copy(c["world"].features, out)
    return replace_regions(out, values)


def copy_ckpt(c, tmp, name="ckpt"):
    import shutil

    return Path(shutil.copytree(c["ckpt"], tmp / name))


# -- image files ---------------------------------------------------------------------------------

def png16(tmp) -> Path:
    from PIL import Image

    values = np.full((32, 40), 32896, dtype=np.uint16)  # 0x8080: mid grey, 128 in 8 bits
    Image.fromarray(values).save(tmp / "photos" / "16bit.png") if (tmp / "photos").mkdir() is None else None
    return tmp / "photos"


def photos(tmp, files: dict[str, bytes]) -> Path:
    folder = tmp / "photos"
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def extract(folder, tmp):
    return ["extract", "--images", folder, "--out", tmp / "out.h5", "--workers", "0", "--quiet"]


# -- the table -----------------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    make: Callable  # (ctx, tmp) -> argv list (CLI) or a zero-argument callable (API)
    code: object  # exit code (CLI) or exception class (API); 0 / None: accepted
    words: tuple = ()
    absent: tuple = ("scores.json", "run", "out.h5")  # relative to tmp: must not be created
    check: Callable | None = None  # (ctx, tmp) -> None: extra assertions after an accepted input
    area: str = "cli"


def _same_caption_results(c, tmp):
    return results_for(c, tmp, [{"image_id": c["test_ids"][0], "caption": "x"},
                                {"image_id": c["test_ids"][0], "caption": "y"}])


def _flip_weights(c, tmp):
    ck = copy_ckpt(c, tmp)
    path = ck / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) - 5] ^= 0x10
    path.write_bytes(bytes(data))
    return ck


def _truncate(c, tmp, name):
    ck = copy_ckpt(c, tmp)
    data = (ck / name).read_bytes()
    (ck / name).write_bytes(data[: len(data) // 2])
    return ck


def _vocab_edit(c, tmp):
    ck = copy_ckpt(c, tmp)
    text = (ck / "vocab.json").read_text()
    (ck / "vocab.json").write_text(text.replace('"circle"', '"circus"', 1))
    return ck


def _grey_value(c, tmp):
    from catcap.data.features import open_feature_store

    with open_feature_store(tmp / "out.h5") as store:
        cells = store.get("16bit").regions
    # the fake encoder's first 3 channels are the mean of each cell's (x - 127) / 128 in each colour
    assert np.allclose(cells[:, :3], (128 - 127) / 128, atol=1e-3), cells[:, :3]


def _extracted(*keys):
    def check(c, tmp):
        from catcap.data.features import open_feature_store

        with open_feature_store(tmp / "out.h5") as store:
            assert sorted(store.keys()) == sorted(keys)
            for k in keys:
                assert np.isfinite(store.get(k).regions).all()
    return check


def _api_generate(c, width=None, nan=False):
    def call():
        from catcap import Captioner

        cap = Captioner.from_pretrained(c["ckpt"])
        feats = np.ones((1, 4, width or 32), dtype=np.float32)
        if nan:
            feats[0, 1, 3] = np.nan
        cap.generate(feats)
    return call


def _api_eval(results, refs):
    def call():
        from catcap.metrics.evaluate import evaluate_captions

        evaluate_captions(results, refs, "bleu,cider")
    return call


def _api_writer(regions):
    def call():
        import tempfile

        from catcap.data.features import HDF5FeatureWriter

        with tempfile.TemporaryDirectory() as d, HDF5FeatureWriter(Path(d) / "f.h5", 8) as w:
            w.write("1", regions)
    return call


def _api_tokenize(value):
    def call():
        from catcap.metrics.tokenizer import tokenize

        tokenize(value)
    return call


def _api_config(overrides):
    def call():
        from catcap.config import load_config
        from catcap.training.experiment import ExperimentConfig

        load_config(ExperimentConfig, None, overrides)
    return call


IDS = lambda c: c["test_ids"]  # noqa: E731

CASES = [
    # ---- result files (catcap evaluate) ----
    Case("results-not-json", lambda c, t: evaluate(write(t / "r.json", "[{oops"), c["world"].dataset, t), 2,
         ("not valid JSON", "line 1")),
    Case("results-empty-file", lambda c, t: evaluate(write(t / "r.json", ""), c["world"].dataset, t), 2,
         ("not valid JSON",)),
    Case("results-not-a-list", lambda c, t: evaluate(write(t / "r.json", {"image_id": 1, "caption": "a"}),
                                                     c["world"].dataset, t), 2, ("expected a JSON list", "found a dict")),
    Case("results-empty-list", lambda c, t: evaluate(results_for(c, t, []), c["world"].dataset, t), 2, ("empty", "nothing to evaluate")),
    Case("results-missing-caption", lambda c, t: evaluate(results_for(c, t, [{"image_id": IDS(c)[0]}]),
                                                          c["world"].dataset, t), 2, ("entry 0", "'caption'")),
    Case("results-caption-not-text", lambda c, t: evaluate(results_for(c, t, [{"image_id": IDS(c)[0], "caption": 7}]),
                                                           c["world"].dataset, t), 2, ("caption must be a string", "found int")),
    Case("results-unknown-images", lambda c, t: evaluate(results_for(c, t, [{"image_id": 99999, "caption": "a"}]),
                                                         c["world"].dataset, t), 2, ("99999", "references do not contain")),
    Case("results-duplicate-ids", lambda c, t: evaluate(_same_caption_results(c, t), c["world"].dataset, t), 2,
         ("duplicate image ids", "one caption per image")),
    Case("results-not-utf8", lambda c, t: evaluate(write(t / "r.json", b'[{"image_id": 1, "caption": "caf\xe9"}]'),
                                                   c["world"].dataset, t), 2, ("not UTF-8", "0xe9", "iconv")),
    Case("results-missing-file", lambda c, t: evaluate(t / "nope.json", c["world"].dataset, t), 2, ("not found",)),
    Case("refs-missing-split", lambda c, t: evaluate(results_for(c, t), dataset_with(
        c, t, lambda d: [im.update(split="train") for im in d["images"]]), t), 2, ("no images in split 'test'", "available splits: train")),
    Case("refs-empty-captions", lambda c, t: evaluate(results_for(c, t), dataset_with(
        c, t, lambda d: [im.update(sentences=[]) for im in d["images"]]), t), 2, ("at least one reference caption",)),
    Case("refs-not-utf8", lambda c, t: evaluate(results_for(c, t), write(t / "d.json", b'{"images": [\xff]}'), t), 2,
         ("not UTF-8",)),
    Case("refs-not-karpathy", lambda c, t: evaluate(results_for(c, t), write(t / "d.json", [1, 2]), t), 2,
         ("expected a COCO annotation file", "found list")),
    Case("unknown-metric", lambda c, t: evaluate(results_for(c, t), c["world"].dataset, t, "--metrics", "bleu,nope"),
         2, ("'nope'", "choose from")),
    # ---- configs (catcap validate-config / train) ----
    Case("config-unknown-key", lambda c, t: validate(c, t, **{"train.epoch": 3}), 2, ("unknown key", "'epoch'", "epochs")),
    Case("config-unknown-section", lambda c, t: validate(c, t, **{"trian.epochs": 3}), 2, ("'trian'", "valid keys")),
    Case("config-wrong-type", lambda c, t: validate(c, t, **{"train.epochs": "many"}), 2, ("train.epochs", "expected int", "'many'")),
    Case("config-batch-zero", lambda c, t: validate(c, t, **{"train.batch_size": 0}), 2, ("train.batch_size must be >= 1", "found 0")),
    Case("config-negative-lr", lambda c, t: validate(c, t, **{"train.schedule.lr": -1}), 2, ("train.schedule.lr must be >= 0", "found -1")),
    Case("config-dropout-out-of-range", lambda c, t: validate(c, t, **{"model.dropout": 1.5}), 2, ("model.dropout must be < 1", "found 1.5")),
    Case("config-heads-do-not-divide", lambda c, t: validate(c, t, **{"model.num_heads": 5}), 2,
         ("divisible by model.num_heads",)),
    Case("config-number-for-text", lambda c, t: validate(c, t, **{"name": 2024}), 2,
         ("config.name: expected str, found int 2024", "quote it")),
    Case("config-file-not-yaml", lambda c, t: ["validate-config", "--config", write(t / "c.yaml", "a: [b\n")], 2,
         ("c.yaml is not valid YAML", "at line 2, column 1")),
    Case("config-file-not-a-mapping", lambda c, t: ["validate-config", "--config", write(t / "c.yaml", "- 1\n- 2\n")],
         2, ("c.yaml", "expected a mapping", "found list")),
    Case("config-file-missing", lambda c, t: ["validate-config", "--config", t / "none.yaml"], 2, ("config file not found", "none.yaml")),
    Case("config-override-without-value", lambda c, t: ["validate-config", "train.epochs"], 2, ("expected key=value",)),
    # ---- datasets and feature stores (catcap train / validate-config) ----
    Case("dataset-missing-split", lambda c, t: validate(c, t, **{"data.dataset": dataset_with(
        c, t, lambda d: [im.update(split="train") for im in d["images"] if im["split"] == "val"])}), 2, ("no images in split(s) 'val'",)),
    Case("dataset-empty-captions", lambda c, t: train(c, t, **{"data.dataset": dataset_with(
        c, t, lambda d: [s.update(raw="", tokens=[]) for im in d["images"] for s in im["sentences"]])}), 2,
         ("empty caption", "fix or remove")),
    Case("dataset-non-utf8", lambda c, t: validate(c, t, **{"data.dataset": write(
        t / "d.json", Path(c["world"].dataset).read_bytes().replace(b"There is", b"Th\xe8re is", 1))}), 2,
         ("not UTF-8",)),
    Case("dataset-duplicate-ids", lambda c, t: validate(c, t, **{"data.dataset": dataset_with(
        c, t, lambda d: d["images"][1].update(cocoid=d["images"][0]["cocoid"]))}), 2, ("more than once",)),
    Case("dataset-not-json", lambda c, t: validate(c, t, **{"data.dataset": write(t / "d.json", "{")}), 2,
         ("not valid JSON",)),
    Case("features-wrong-width", lambda c, t: validate(c, t, **{"model.feature_dim": 48}), 2, ("32-d", "model.feature_dim is 48", "set model.feature_dim=32")),
    Case("features-nan", lambda c, t: train(c, t, **{"data.features": features_with(
        c, t, lambda r: np.where(np.arange(r.size).reshape(r.shape) == 5, np.nan, r))}), 2, ("NaN",)),
    Case("features-inf", lambda c, t: train(c, t, **{"data.features": features_with(
        c, t, lambda r: np.where(np.arange(r.size).reshape(r.shape) == 5, np.inf, r))}), 2, ("NaN/inf",)),
    Case("features-not-hdf5", lambda c, t: validate(c, t, **{"data.features": write(t / "f.h5", "plain text")}), 2,
         ("f.h5 is not an HDF5 file", "catcap-features-v1")),
    Case("features-missing", lambda c, t: validate(c, t, **{"data.features": t / "none.h5"}), 2, ("none.h5 does not exist",)),
    # ---- checkpoints ----
    Case("checkpoint-other-family-resume", lambda c, t: [
        "train", *tiny_run_overrides(c["world"], c["lstm"].parent, **{"train.max_steps": 3}), "--resume"], 2,
         ("model.decoder is 'updown' in the checkpoint, 'transformer' in the config",)),
    Case("checkpoint-other-family-init", lambda c, t: train(c, t, **{"train.init_from": c["lstm"]}), 2,
         ("do not fit", "model.decoder is 'updown' in the checkpoint")),
    Case("checkpoint-bit-flipped", lambda c, t: ["evaluate", "--checkpoint", _flip_weights(c, t), "--output",
                                                 t / "scores.json", "--quiet"], 2, ("model.safetensors", "sha256")),
    Case("checkpoint-truncated", lambda c, t: ["evaluate", "--checkpoint", _truncate(c, t, "model.safetensors"),
                                               "--output", t / "scores.json"], 2, ("model.safetensors", "damaged")),
    Case("checkpoint-vocab-edited", lambda c, t: ["evaluate", "--checkpoint", _vocab_edit(c, t), "--output",
                                                  t / "scores.json"], 2, ("vocab.json", "sha256")),
    Case("checkpoint-vocab-truncated", lambda c, t: ["evaluate", "--checkpoint", _truncate(c, t, "vocab.json"),
                                                     "--output", t / "scores.json"], 2, ("vocab.json", "not readable JSON")),
    Case("checkpoint-missing", lambda c, t: ["evaluate", "--checkpoint", t / "nope", "--output", t / "scores.json"],
         2, ("nope", "does not exist")),
    Case("checkpoint-run-folder", lambda c, t: ["evaluate", "--checkpoint", c["ckpt"].parent, "--output",
                                                t / "scores.json"], 2, ("training run's folder", "last")),
    # ---- images (catcap extract; a tiny fake encoder stands in for EfficientNet) ----
    Case("image-corrupt-jpeg", lambda c, t: extract(photos(t, {"1_a.jpg": b"\xff\xd8\xff garbage" * 9}), t), 2,
         ("could not be read", "errors.txt")),
    Case("image-empty-png", lambda c, t: extract(photos(t, {"1_a.png": b""}), t), 2, ("could not be read",)),
    Case("image-truncated-jpeg", lambda c, t: extract(photos(t, {"1_a.jpg": jpeg_bytes()[:200]}), t), 2,
         ("could not be read",)),
    Case("image-huge-png-header", lambda c, t: extract(photos(t, {"1_a.png": png_header_only(40000, 40000)}), t), 2,
         ("could not be read", "DecompressionBombError", "pixels")),
    Case("image-huge-jpeg-header", lambda c, t: extract(photos(t, {"1_a.jpg": huge_jpeg()}), t), 2,
         ("could not be read", "DecompressionBombError", "pixels")),
    Case("image-cmyk-jpeg-accepted", lambda c, t: extract(photos(t, {"cmyk.jpg": jpeg_bytes("CMYK")}), t), 0,
         absent=(), check=_extracted("cmyk")),
    Case("image-16bit-png-accepted", lambda c, t: extract(png16(t), t), 0, absent=(), check=_grey_value),
    Case("image-one-bad-among-good", lambda c, t: extract(photos(t, {"good.jpg": jpeg_bytes(), "bad.jpg": b"nope"}), t),
         1, absent=(), check=_extracted("good")),
    Case("image-folder-empty", lambda c, t: extract(photos(t, {}), t), 2, ("no images",)),
    Case("extract-out-not-h5", lambda c, t: ["extract", "--images", photos(t, {"a.jpg": jpeg_bytes()}), "--out",
                                             t / "out.txt", "--workers", "0"], 2, (".h5",), absent=("out.txt",)),
    # ---- Python API ----
    Case("api-generate-wrong-width", lambda c, t: _api_generate(c, width=48), ValueError, ("32", "48"), area="api"),
    Case("api-generate-nan-features", lambda c, t: _api_generate(c, nan=True), ValueError, ("NaN",), area="api"),
    Case("api-evaluate-unknown-image", lambda c, t: _api_eval({5: "a dog"}, {1: ["a dog"]}), ValueError, ("5",),
         area="api"),
    Case("api-evaluate-empty-references", lambda c, t: _api_eval({1: "a dog"}, {1: []}), ValueError, ("1",),
         area="api"),
    Case("api-writer-nan", lambda c, t: _api_writer(np.full((3, 8), np.nan, np.float32)), ValueError, ("NaN",),
         area="api"),
    Case("api-writer-wrong-width", lambda c, t: _api_writer(np.ones((3, 7), np.float32)), ValueError, ("(N>=1, 8)",),
         area="api"),
    Case("api-config-unknown-key", lambda c, t: _api_config(["model.d_modle=4"]), ValueError, ("config.model", "'d_modle'", "d_model"),
         area="api"),
]


def _snapshot(root: Path) -> dict:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} if root.exists() else {}


@pytest.fixture
def fake_encoder(monkeypatch):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "features"))
    from extract_fakes import FakeEncoder

    monkeypatch.setattr("catcap.features.extract.make_encoder", lambda name, backend="torch": FakeEncoder(name))


def test_the_catalogue_has_at_least_40_cases():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, ctx, tmp_path, capsys, fake_encoder):
    made = case.make(ctx, tmp_path)
    protected = {**_snapshot(ctx["world"].root), **_snapshot(ctx["root"])}  # the shared inputs: never changed
    capsys.readouterr()
    if case.area == "api":
        if case.code:
            with pytest.raises(case.code) as info:
                made()
            message = str(info.value)
            assert "\n" not in message.strip(), message
        else:
            made()
            message = ""
    else:
        code = main([str(a) for a in made])
        err = capsys.readouterr().err
        assert code == case.code, err
        assert "Traceback" not in err, err
        message = err
        if case.code == 2:  # refused: one line; 1 (some inputs failed) lists each failure
            lines = [line for line in err.splitlines() if "error" in line]
            assert len(lines) == 1 and lines[0].startswith("catcap ") and err.rstrip().endswith(lines[0]), err
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"
    for name in case.absent:
        assert not (tmp_path / name).exists(), f"{name} was created by a refused input"
    if case.check is not None:
        case.check(ctx, tmp_path)
    after = {**_snapshot(ctx["world"].root), **_snapshot(ctx["root"])}
    assert {p: b for p, b in after.items() if p in protected} == protected, "a shared input file was changed"

