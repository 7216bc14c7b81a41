"""catcap analyze history: per-position history weights, one image's attention, the plots and the CLI.

Oracles: a greedy decoding done by hand with ``model.decoder.step`` (``_manual``) for the
collected weights and one image's attention; for the plots, the values drawn are read back
from the saved matplotlib Figure and compared with the attention weights given."""

import json
from pathlib import Path
from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'catcap[viz]')")

from catcap import Captioner, api  # noqa: E402
from catcap.cli.main import main  # noqa: E402
from catcap.config import to_dict  # noqa: E402
from catcap.data.features import open_feature_store  # noqa: E402
from catcap.data.karpathy import load_karpathy  # noqa: E402
from catcap.data.synthetic import make_world  # noqa: E402
from catcap.training.checkpoint import save_checkpoint  # noqa: E402
from catcap.training.setup import make_model  # noqa: E402
from catcap.viz.history import (HistoryCurve, ImageAttention, collect_history_weights, image_attention, image_file,  # noqa: E402
                                image_folders)
from catcap.viz.history_plots import (LEGEND_INSIDE, history_weight_figure, plot_history_weight,  # noqa: E402
                                      plot_image_attention)

PNG = b"\x89PNG\r\n\x1a\n"
MAX_LEN = 12


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("hworld") / "shapes", num_train=60, num_val=10, num_test=10,
                      seed=0, feature_dim=16, progress=False)


@pytest.fixture(scope="module")
def cat_checkpoint(world, tmp_path_factory):
    """A tiny CAT (CACA, chc) trained for a few steps with AWC."""
    out = tmp_path_factory.mktemp("cat")
    items = {
        "data.dataset": world.dataset, "data.features": world.features, "data.min_count": 1,
        "model.feature_dim": 16, "model.d_model": 32, "model.num_heads": 2, "model.encoder_layers": 1,
        "model.decoder_layers": 2, "model.d_ff": 64, "model.cross_attention": "caca", "train.awc.enabled": "true",
        "out_dir": out, "train.batch_size": 12, "train.epochs": 1, "train.max_steps": 12,
        "train.schedule.warmup": 10, "train.progress": "false",
    }
    api.train(None, [f"{k}={v}" for k, v in items.items()], log=lambda m: None)
    return out / "last"


def _variant(ckpt, out, **model):
    """A checkpoint with the same config and vocab but another (untrained) model."""
    cap = Captioner.from_pretrained(ckpt, device="cpu")
    history = replace(cap.config.model.history, **{k: model.pop(k) for k in ("strategy",) if k in model})
    cfg = replace(cap.config, model=replace(cap.config.model, history=history, **model),
                  train=replace(cap.config.train, awc=replace(cap.config.train.awc, enabled=False)))
    torch.manual_seed(0)
    save_checkpoint(out, model=make_model(cfg, cap.vocab), config=to_dict(cfg), vocab=cap.vocab.to_dict())
    return out


def _manual(cap, regions, layers=(-1, 0)):
    """Greedy decoding of one image by hand with model.decoder.step: per step the tokens and
    the head-averaged history weight of each layer in ``layers``."""
    v, model = cap.vocab, cap.model
    feats = torch.from_numpy(regions)[None]
    memory, mask = model.encode(feats, torch.ones(feats.shape[:2], dtype=torch.bool))
    state = model.init_state(memory, mask, group=1)
    token, tokens, weights = v.bos_id, [], {layer: [] for layer in layers}
    for step in range(MAX_LEN + 1):
        logits, state, extras = model.decoder.step(torch.tensor([token]), state)
        for layer in layers:
            weights[layer].append(float(extras[layer]["history_weight"][0, :, 0].mean()))
        logits = logits[0].clone()
        logits[[v.pad_id, v.bos_id, v.unk_id]] = float("-inf")
        token = v.eos_id if step == MAX_LEN else int(logits.argmax())
        tokens.append(token)
        if token == v.eos_id:
            break
    return tokens, weights


def _val(world):
    records = load_karpathy(world.dataset, ["val"])["val"]
    store = open_feature_store(world.features)
    return records, store


@torch.no_grad()
def test_collected_weights_equal_a_direct_step_by_step_computation(world, cat_checkpoint):
    cap = Captioner.from_pretrained(cat_checkpoint, device="cpu")
    records, store = _val(world)
    manual = [_manual(cap, store.get(r.key).regions) for r in records]
    for include_eos in (True, False):
        for layer in (-1, 0):
            # batch_size 4: batches of 4, 4, 2 images with padded regions
            curve = collect_history_weights(cat_checkpoint, split="val", limit=None, layer=layer, batch_size=4,
                                            max_len=MAX_LEN, include_eos=include_eos, progress=False, device="cpu")
            lengths = [len(t) - (0 if include_eos else 1) for t, _ in manual]
            assert len(curve.mean) == max(lengths)
            assert curve.counts == [sum(n > k for n in lengths) for k in range(max(lengths))]
            expected = [np.mean([w[layer][k] for (_, w), n in zip(manual, lengths) if n > k])
                        for k in range(max(lengths))]
            np.testing.assert_allclose(curve.mean, expected, atol=2e-6)
            np.testing.assert_allclose(np.mean(curve.per_head, 0), curve.mean, atol=1e-12)
            assert all(0.0 <= a <= 1.0 for a in curve.mean)
            assert curve.images == len(records) and curve.layer == layer % 2 and curve.awc
    # the same captions as the public greedy generate
    texts = cap.generate([store.get(r.key).regions for r in records], num_beams=1, max_length=MAX_LEN)
    assert [curve.captions[r.key] for r in records] == texts
    assert curve.beta is not None and len(curve.beta) == 2  # AWC betas of the layer, one per head
    # limit: the first K images only
    short = collect_history_weights(cap, split="val", limit=3, max_len=MAX_LEN, progress=False)
    assert short.images == 3 and short.counts[0] == 3 and short.beta is None  # a loaded model has no trainer state


@torch.no_grad()
def test_one_image_attention_sums_to_one_and_labels_history_with_earlier_words(world, cat_checkpoint):
    cap = Captioner.from_pretrained(cat_checkpoint, device="cpu")
    records, store = _val(world)
    key = records[2].key
    att = image_attention(cap, key, max_len=MAX_LEN)
    tokens, weights = _manual(cap, store.get(key).regions)
    assert att.tokens == [cap.vocab.word(t) for t in tokens] and att.key == key
    np.testing.assert_allclose(att.history_weight, weights[-1], atol=2e-6)
    n = store.get(key).regions.shape[0]
    assert att.region_attention.shape == (len(tokens), n) and att.boxes.shape == (n, 4)
    for k in range(len(tokens)):
        assert len(att.history_attention[k]) == k + 1  # CACA (chc): entries of steps 1..k
        assert att.history_labels[k] == (["<bos>"] + att.tokens)[: k + 1]
        assert att.history_attention[k].sum() == pytest.approx(att.history_weight[k], abs=1e-5)
        assert att.region_attention[k].sum() + att.history_weight[k] == pytest.approx(1.0, abs=1e-5)
    assert att.image_path is not None and att.image_path.name == f"{key}.png"
    default = image_attention(cap, None, split="val", max_len=MAX_LEN)
    assert default.key == records[0].key
    with pytest.raises(ValueError, match="not in .*pass --image-id"):
        image_attention(cap, "no-such-id")


def test_light_caca_ihc_has_no_history_at_the_first_word(world, cat_checkpoint, tmp_path):
    ckpt = _variant(cat_checkpoint, tmp_path / "light", cross_attention="light_caca", strategy="ihc")
    curve = collect_history_weights(ckpt, split="val", max_len=MAX_LEN, progress=False)
    assert curve.cross_attention == "light_caca" and curve.strategy == "ihc" and not curve.awc
    assert curve.mean[0] == 0.0 and all(0.0 < a <= 1.0 for a in curve.mean[1:])
    att = image_attention(ckpt, max_len=MAX_LEN)
    assert len(att.history_attention[0]) == 0 and att.history_labels[1] == ["<bos>"]
    path = plot_image_attention(att, tmp_path / "ihc.png")
    assert path.read_bytes()[:8] == PNG


def test_vanilla_checkpoint_and_bad_arguments_are_refused(world, cat_checkpoint, tmp_path, capsys):
    vanilla = _variant(cat_checkpoint, tmp_path / "vanilla", cross_attention="vanilla")
    with pytest.raises(ValueError) as err:
        collect_history_weights(vanilla, progress=False)
    text = str(err.value)
    assert "model.cross_attention='vanilla'" in text and "no historical context memory" in text
    assert "model.cross_attention=caca" in text  # how to fix it
    with pytest.raises(ValueError, match="vanilla"):
        image_attention(vanilla)
    assert main(["analyze", "history", "--checkpoint", str(vanilla), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "no historical context memory" in capsys.readouterr().err
    with pytest.raises(ValueError, match="the model has 2 decoder layers"):
        collect_history_weights(cat_checkpoint, layer=2, progress=False)
    assert main(["analyze", "history", "--checkpoint", str(cat_checkpoint), "--label", "a", "--label", "b",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "2 --label for 1 --checkpoint" in capsys.readouterr().err


def _png_size(path):
    from PIL import Image

    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 1000
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        return im.size


def test_cli_writes_the_pictures_and_the_numbers(world, cat_checkpoint, tmp_path, capsys):
    records, _ = _val(world)
    out = tmp_path / "one"
    assert main(["analyze", "history", "--checkpoint", str(cat_checkpoint), "--out", str(out), "--limit", "6",
                 "--max-len", str(MAX_LEN), "--quiet"]) == 0
    printed = capsys.readouterr().out
    first = records[0].key
    for name in ("history_weight.png", "history_weight.json", f"attention_{first}.png"):
        assert f"wrote {out / name}" in printed
    width, height = _png_size(out / "history_weight.png")
    assert width > 500 and height > 400
    _png_size(out / f"attention_{first}.png")
    data = json.loads((out / "history_weight.json").read_text())
    (entry,) = data["checkpoints"]
    curve = collect_history_weights(cat_checkpoint, limit=6, max_len=MAX_LEN, progress=False)
    assert entry["mean"] == pytest.approx(curve.mean) and entry["counts"] == curve.counts
    assert entry["positions"] == list(range(1, len(curve.mean) + 1)) and entry["images"] == 6
    assert entry["label"] == "CAT + AWC" and entry["awc"] is True and len(entry["beta"]) == 2
    assert entry["summary"]["1"] == pytest.approx(curve.mean[0]) and entry["summary"]["last"] == pytest.approx(curve.mean[-1])
    assert data["image_id"] == first and len(entry["captions"]) == 6
    assert f"t=1 {curve.mean[0]:.3f}" in printed

    # two checkpoints, own labels, another image and layer: one attention picture per checkpoint
    out2 = tmp_path / "two"
    key = records[4].key
    assert main(["analyze", "history", "--checkpoint", str(cat_checkpoint), "--label", "with AWC",
                 "--checkpoint", str(cat_checkpoint), "--label", "again", "--out", str(out2), "--limit", "4",
                 "--layer", "0", "--image-id", key, "--words-only", "--quiet"]) == 0
    data = json.loads((out2 / "history_weight.json").read_text())
    assert [c["label"] for c in data["checkpoints"]] == ["with AWC", "again"]
    assert data["checkpoints"][0]["layer"] == 0 and data["checkpoints"][0]["include_eos"] is False
    assert data["checkpoints"][0]["mean"] == data["checkpoints"][1]["mean"]
    assert data["files"]["attention"] == [f"attention_{key}_with-AWC.png", f"attention_{key}_again.png"]
    for name in data["files"]["attention"]:
        _png_size(out2 / name)


def test_the_photo_is_found_where_import_recorded_it_or_in_images_and_its_absence_is_said(world, cat_checkpoint,
                                                                                           tmp_path, capsys):
    records, _ = _val(world)
    rec = records[0]
    photo = next(Path(world.dataset).parent.rglob(rec.filename))
    data = json.loads(Path(world.dataset).read_text())
    moved = tmp_path / "elsewhere" / "dataset.json"  # the JSON apart from the photos, as in the Flickr8k recipe
    moved.parent.mkdir()
    moved.write_text(json.dumps(data))
    assert image_file(rec, image_folders(moved)) is None
    assert image_file(rec, image_folders(moved, images=photo.parent)) == photo.parent / rec.filename
    data["catcap_import"] = {"source": {"images_dir": str(photo.parent)}}
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(data))
    assert image_file(rec, image_folders(recorded)) == photo.parent / rec.filename

    args = ["analyze", "history", "--checkpoint", str(cat_checkpoint), "--limit", "2", "--max-len", str(MAX_LEN),
            "--quiet", "--dataset", str(moved)]
    assert main([*args, "--out", str(tmp_path / "bars")]) == 0
    assert f"the photo of image {rec.key} was not found" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "photo"), "--images", str(photo.parent)]) == 0
    assert "was not found" not in capsys.readouterr().err


def test_a_failed_analysis_leaves_no_empty_output_folder(cat_checkpoint, tmp_path):
    assert main(["analyze", "history", "--checkpoint", str(cat_checkpoint), "--out", str(tmp_path / "o"),
                 "--split", "no-such-split", "--quiet"]) == 2
    assert not (tmp_path / "o").exists()


def _saved_figures(monkeypatch) -> list:
    """The matplotlib Figures the plots save from now on (to read back what they drew)."""
    from catcap.viz import history_plots

    figures, save = [], history_plots._save
    monkeypatch.setattr(history_plots, "_save", lambda fig, path, **k: figures.append(fig) or save(fig, path, **k))
    return figures


def test_region_fallbacks_grid_and_bars(tmp_path, monkeypatch):
    """No image file: square N without boxes -> grid heat map of the weights in row-major cells;
    other N -> one bar per region; below, one bar per history entry. The drawn values are the
    attention weights given (distinct, so a transposed grid or a reordered bar would show)."""
    figures = _saved_figures(monkeypatch)
    for n in (4, 3):
        regions = np.arange(1, 3 * n + 1, dtype=float).reshape(3, n) / 100  # token k, region i: (k*n + i + 1) / 100
        history = [np.arange(1, k + 2) / 10 for k in range(3)]  # token k's entries: 0.1, 0.2, ..
        att = ImageAttention(key="x", label="toy", layer=1, num_layers=2, strategy="chc", tokens=["a", "b", "<eos>"],
                             history_weight=np.full(3, 0.4), region_attention=regions, history_attention=history,
                             history_labels=[["<bos>", "a", "b"][: k + 1] for k in range(3)], boxes=None,
                             image_path=None)
        _png_size(plot_image_attention(att, tmp_path / f"toy{n}.png"))
    grid, bars = figures
    for k in range(3):
        top, bottom = grid.axes[2 * k], grid.axes[2 * k + 1]
        (image,) = top.get_images()
        # regions 1, 2 on the top row, 3, 4 below (row-major cells)
        np.testing.assert_allclose(image.get_array(), np.array([[4 * k + 1, 4 * k + 2], [4 * k + 3, 4 * k + 4]]) / 100)
        np.testing.assert_allclose([p.get_height() for p in bottom.patches], np.arange(1, k + 2) / 10)
        assert [t.get_text() for t in bottom.get_xticklabels()] == ["<bos>", "a", "b"][: k + 1]
        heights = [p.get_height() for p in bars.axes[2 * k].patches]
        np.testing.assert_allclose(heights, np.array([3 * k + 1, 3 * k + 2, 3 * k + 3]) / 100)
    with pytest.raises(ValueError, match="at least one HistoryCurve"):
        plot_history_weight([], tmp_path / "none.png")


@pytest.fixture(scope="module")
def m2_caca_checkpoint(world, tmp_path_factory):
    """A tiny M2 + CACA (memory-augmented encoder with 2 levels, meshed decoder, one history per
    level) trained for a few steps with AWC."""
    out = tmp_path_factory.mktemp("m2caca")
    items = {
        "data.dataset": world.dataset, "data.features": world.features, "data.min_count": 1,
        "model.feature_dim": 16, "model.d_model": 32, "model.num_heads": 2, "model.encoder_layers": 2,
        "model.decoder_layers": 2, "model.d_ff": 64, "model.encoder": "memory_augmented", "model.decoder": "meshed",
        "model.memory_slots": 3, "model.cross_attention": "caca", "train.awc.enabled": "true",
        "out_dir": out, "train.batch_size": 12, "train.epochs": 1, "train.max_steps": 12,
        "train.schedule.warmup": 10, "train.progress": "false",
    }
    api.train(None, [f"{k}={v}" for k, v in items.items()], log=lambda m: None)
    return out / "last"


@torch.no_grad()
def test_m2_caca_history_weights_average_every_level_head(world, m2_caca_checkpoint, tmp_path, capsys):
    """On M2 + CACA each decoder layer reports one history weight per encoder level and head
    (2 levels x 2 heads here); the curve is their mean, step by step as the decoder computes it."""
    cap = Captioner.from_pretrained(m2_caca_checkpoint, device="cpu")
    records, store = _val(world)
    manual = [_manual(cap, store.get(r.key).regions) for r in records]
    curve = collect_history_weights(m2_caca_checkpoint, split="val", batch_size=4, max_len=MAX_LEN, progress=False,
                                    device="cpu")
    lengths = [len(t) for t, _ in manual]
    expected = [np.mean([w[-1][k] for (_, w), n in zip(manual, lengths) if n > k]) for k in range(max(lengths))]
    np.testing.assert_allclose(curve.mean, expected, atol=2e-6)
    assert len(curve.per_head) == 4 and len(curve.beta) == 4  # level-heads, and their AWC betas
    _check_one_image(cap, records[0].key)
    entry = _analyze_cli(m2_caca_checkpoint, tmp_path / "m2")
    assert entry["label"] == "M2 + CACA + AWC" and entry["mean"] == pytest.approx(
        collect_history_weights(m2_caca_checkpoint, limit=4, max_len=MAX_LEN, progress=False).mean)


def _check_one_image(cap, key):
    """Each word's attention has one history entry per step so far, and covers regions + history."""
    att = image_attention(cap, key, max_len=MAX_LEN)
    for k in range(len(att.tokens)):
        assert len(att.history_attention[k]) == k + 1
        assert att.region_attention[k].sum() + att.history_weight[k] == pytest.approx(1.0, abs=1e-5)


def _analyze_cli(checkpoint, out) -> dict:
    """``catcap analyze history`` on 4 images: the plot is a PNG; -> the checkpoint's JSON entry."""
    assert main(["analyze", "history", "--checkpoint", str(checkpoint), "--out", str(out), "--limit", "4",
                 "--max-len", str(MAX_LEN), "--quiet"]) == 0
    _png_size(out / "history_weight.png")
    (entry,) = json.loads((out / "history_weight.json").read_text())["checkpoints"]
    return entry


def _tiny_recurrent_caca(world, out, parts: dict):
    """A tiny recurrent captioner with CACA trained a few steps with AWC -> its last checkpoint."""
    items = {
        "data.dataset": world.dataset, "data.features": world.features, "data.min_count": 1,
        "model.feature_dim": 16, "model.d_model": 32, "model.decoder_layers": 1, "model.rnn.word_dim": 16,
        "model.cross_attention": "caca", "train.awc.enabled": "true", "out_dir": out, "train.batch_size": 12,
        "train.epochs": 1, "train.max_steps": 12, "train.schedule.name": "step", "train.schedule.lr": 0.002,
        "train.progress": "false", **parts,
    }
    api.train(None, [f"{k}={v}" for k, v in items.items()], log=lambda m: None)
    return out / "last"


@pytest.fixture(scope="module")
def updown_caca_checkpoint(world, tmp_path_factory):
    """Up-Down + CACA: embedded regions, soft attention, one history."""
    return _tiny_recurrent_caca(world, tmp_path_factory.mktemp("updowncaca"), {
        "model.num_heads": 1, "model.encoder": "embed", "model.decoder": "updown", "model.rnn.att_hidden": 16})


@pytest.fixture(scope="module")
def aoanet_caca_checkpoint(world, tmp_path_factory):
    """AoANet + CACA: a 2-layer refiner, 2 heads, one history per head."""
    return _tiny_recurrent_caca(world, tmp_path_factory.mktemp("aoanetcaca"), {
        "model.num_heads": 2, "model.encoder": "aoa_refiner", "model.encoder_layers": 2, "model.decoder": "aoa"})


@pytest.mark.parametrize("name, heads, label", [("updown", 1, "Up-Down + CACA + AWC"), ("aoanet", 2, "AoANet + CACA + AWC")])
def test_recurrent_caca_history_weights_and_attention(world, request, tmp_path, name, heads, label):
    """An LSTM decoder's CACA has one layer: Up-Down's soft attention one head, AoANet's 2 heads
    with a history each. The curve is the head-averaged weight, step by step as the decoder
    computes it, with one curve and one beta per head; each word's attention covers regions + history."""
    checkpoint = request.getfixturevalue(f"{name}_caca_checkpoint")  # trained here, outside no_grad
    with torch.no_grad():
        _check_recurrent_history(world, checkpoint, heads)
    assert _analyze_cli(checkpoint, tmp_path / name)["label"] == label


def _check_recurrent_history(world, checkpoint, heads: int) -> None:
    cap = Captioner.from_pretrained(checkpoint, device="cpu")
    records, store = _val(world)
    manual = [_manual(cap, store.get(r.key).regions, layers=(0,)) for r in records]
    curve = collect_history_weights(checkpoint, split="val", batch_size=4, max_len=MAX_LEN, progress=False, device="cpu")
    lengths = [len(t) for t, _ in manual]
    expected = [np.mean([w[0][k] for (_, w), n in zip(manual, lengths) if n > k]) for k in range(max(lengths))]
    np.testing.assert_allclose(curve.mean, expected, atol=2e-6)
    assert len(curve.per_head) == heads and len(curve.beta) == heads
    _check_one_image(cap, records[0].key)


def _toy_curve(k: int, beta: bool) -> HistoryCurve:
    mean = [0.05 * k + 0.01 * t for t in range(12)]
    return HistoryCurve(label=f"arm {k}", checkpoint=f"c{k}", cross_attention="caca", strategy="chc", awc=beta,
                        layer=2, num_layers=3, split="val", images=10, include_eos=False, mean=mean,
                        per_head=[mean], counts=[10] * 12, beta=[0.1 * k, 0.1 * k] if beta else None)


@pytest.mark.parametrize("arms", [1, 4])
def test_history_weight_legend_covers_no_curve(arms, tmp_path):
    """Up to LEGEND_INSIDE entries the legend sits in the top panel; with more (4 arms with AWC
    targets: 8 entries, as the seeds report draws) it goes under both panels, where no line is,
    and lists every entry."""
    curves = [_toy_curve(k, beta=True) for k in range(arms)]
    fig = history_weight_figure(curves)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    top, low = fig.axes
    entries = 2 * arms
    if entries <= LEGEND_INSIDE:
        assert top.get_legend() is not None and not fig.legends
        return
    assert top.get_legend() is None and len(fig.legends) == 1
    legend = fig.legends[0]
    assert len(legend.get_texts()) == entries
    box = legend.get_window_extent(renderer)
    for ax in (top, low):
        panel = ax.get_tightbbox(renderer)  # the panel with its tick labels and axis title
        assert box.y1 <= panel.y0, (box, panel)
    assert box.y0 >= 0, "the legend runs off the bottom of the figure"
    _png_size(plot_history_weight(curves, tmp_path / "many.png"))
