"""The shapes world: real files in tmp_path, determinism, true captions and answers, features."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from catcap.data.features import HDF5FeatureStore
from catcap.data.synthetic import make_world
from catcap.data.synthetic import world as world_module
from catcap.data.synthetic.grammar import COUNT_WORDS, SIZE_WORDS, WORD_TO_SHAPE
from catcap.data.synthetic.scenes import COLORS
from catcap.data.synthetic.world import ENCODER, make_image
from catcap.metrics.tokenizer import ptb_tokenize

F = 16
SIZES = dict(num_train=14, num_val=3, num_test=3)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    paths = make_world(tmp_path_factory.mktemp("w") / "shapes", seed=3, feature_dim=F, progress=False, **SIZES)
    return paths, json.loads(paths.dataset.read_text(encoding="utf-8"))["images"]


# ---------------------------------------------------------------- a checker for the captions

_DET = {"a": 1, "an": 1, "one": 1, "single": 1} | {w: i for i, w in enumerate(COUNT_WORDS) if i}
_SIZE = {w: s for s, ws in SIZE_WORDS.items() for w in ws}
_GENERIC = {"object", "objects", "shape", "shapes", "figures", "one"}
_RELATIONS = {("to", "the", "left", "of"): "left", ("on", "the", "left", "of"): "left", ("left", "of"): "left",
              ("to", "the", "right", "of"): "right", ("on", "the", "right", "of"): "right",
              ("right", "of"): "right", ("above",): "above", ("over",): "above", ("below",): "below",
              ("under",): "below", ("beneath",): "below", ("between",): "between"}


def _centre(obj):
    x1, y1, x2, y2 = obj["box"]
    return (x1 + x2) / 2, (y1 + y2) / 2


def _phrases(tokens):
    """[(start, end, count, size, colour, shape-or-None)] for every noun phrase of a caption."""
    out = []
    for i, tok in enumerate(tokens):
        generic = tok in _GENERIC and i > 0 and tokens[i - 1] in set(COLORS) | {"colored"} | set(_DET)
        if tok not in WORD_TO_SHAPE and not generic:
            continue
        j, colour, size = i - 1, None, None
        if j >= 0 and tokens[j] in COLORS:
            colour, j = tokens[j], j - 1
        elif j >= 0 and tokens[j] == "colored":
            j -= 1
        if j >= 0 and tokens[j] in _SIZE:
            size, j = _SIZE[tokens[j]], j - 1
        count = _DET.get(tokens[j]) if j >= 0 else None
        if tok == "one" and count is None:  # "a red one": the "one" is the noun here
            count = 1 if tokens[j] in ("a", "an") else None
        out.append((j, i, count, size, colour, WORD_TO_SHAPE.get(tok)))
    return out


def _matching(objects, colour, shape):
    return [o for o in objects if (colour is None or o["color"] == colour) and (shape is None or o["shape"] == shape)]


def check_caption(tokens, objects):
    """Assert that every noun phrase and relation of the caption is true of the objects."""
    phrases = _phrases(tokens)
    for start, end, count, size, colour, shape in phrases:
        group = _matching(objects, colour, shape)
        assert group, f"{tokens}: no {colour} {shape} in {objects}"
        if count is not None:
            assert len(group) == count, f"{tokens}: counted {count} {colour} {shape}, scene has {len(group)}"
        if size is not None:
            assert all(o["size"] == size for o in group), f"{tokens}: not all {size}"
    for words, rel in _RELATIONS.items():
        for k in range(len(tokens) - len(words) + 1):
            if tuple(tokens[k:k + len(words)]) != words or (len(words) == 2 and k > 0 and tokens[k - 1] == "the"):
                continue
            left = [p for p in phrases if p[1] < k][-1]
            right = next(p for p in phrases if p[0] >= k + len(words) - 1)
            a, b = _matching(objects, left[4], left[5]), _matching(objects, right[4], right[5])
            _check_relation(tokens, rel, a, b)
    _check_location(tokens, objects, phrases)
    return phrases


def _check_location(tokens, objects, phrases):
    """"in the top left corner", "on the right", "at the bottom": the first phrase's object is there."""
    text = " ".join(tokens).replace("from left to right", "")
    words = {w for w in ("top", "bottom", "left", "right") if f"{w} of" not in text and f" {w}" in text}
    if not words:
        return
    (obj,) = _matching(objects, phrases[0][4], phrases[0][5])
    x, y = _centre(obj)
    for w in words:
        assert {"top": y < 0.35, "bottom": y > 0.65, "left": x < 0.35, "right": x > 0.65}[w], (tokens, obj)


def _check_relation(tokens, rel, a, b):
    if rel == "between":
        (x, y), (p, q) = _centre(a[0]), [_centre(o) for o in b]
        assert min(p[0], q[0]) < x < max(p[0], q[0]) or min(p[1], q[1]) < y < max(p[1], q[1]), tokens
        return
    for oa in a:
        for ob in b:
            (xa, ya), (xb, yb) = _centre(oa), _centre(ob)
            ok = {"left": xa < xb, "right": xa > xb, "above": ya < yb, "below": ya > yb}[rel]
            assert ok, f"{tokens}: {rel} does not hold for {oa} / {ob}"


# ---------------------------------------------------------------- the files


def test_world_layout_and_schema(world):
    paths, images = world
    assert sorted(p.name for p in paths.root.iterdir()) == ["dataset_shapes.json", "features.h5", "images", "world.json"]
    assert [e["split"] for e in images] == ["train"] * 14 + ["val"] * 3 + ["test"] * 3
    assert [e["imgid"] for e in images] == list(range(20))
    assert [e["cocoid"] for e in images] == list(range(1, 21))
    sentids = [s for e in images for s in e["sentids"]]
    assert len(sentids) == len(set(sentids)) == 100
    for e in images:
        assert e["filepath"] == "images" and e["filename"] == f"{e['cocoid']}.png"
        with Image.open(paths.root / e["filepath"] / e["filename"]) as im:
            assert im.size == (128, 128) and im.mode == "RGB"
        assert 1 <= len(e["objects"]) <= 4 and e["qa"]
        assert [s["sentid"] for s in e["sentences"]] == e["sentids"]
        assert all(s["imgid"] == e["imgid"] for s in e["sentences"])
    info = json.loads(paths.info.read_text())
    assert info["seed"] == 3 and info["feature_dim"] == F and info["splits"] == {"train": 14, "val": 3, "test": 3}


def test_captions_are_sentences_tokenised_like_the_evaluation(world):
    _, images = world
    for e in images:
        raws = [s["raw"] for s in e["sentences"]]
        assert len(raws) == 5 and len(set(raws)) == 5, raws
        for s in e["sentences"]:
            assert s["raw"][0].isupper() and s["raw"].endswith(".") and not s["raw"].endswith("..")
            assert s["tokens"] == ptb_tokenize(s["raw"])


def test_same_seed_same_bytes_other_seed_differs(tmp_path, world):
    paths, _ = world
    again = make_world(tmp_path / "again", seed=3, feature_dim=F, progress=False, **SIZES)
    assert again.dataset.read_bytes() == paths.dataset.read_bytes()
    assert again.info.read_bytes() == paths.info.read_bytes()
    for name in sorted(os.listdir(paths.images)):
        a, b = Image.open(paths.images / name), Image.open(again.images / name)
        assert np.array_equal(np.asarray(a), np.asarray(b)), name
    with HDF5FeatureStore(paths.features) as s1, HDF5FeatureStore(again.features) as s2:
        assert s1.keys() == s2.keys() and s1.meta == s2.meta
        for key in s1.keys():
            f1, f2 = s1.get(key), s2.get(key)
            assert f1.regions.tobytes() == f2.regions.tobytes() and f1.boxes.tobytes() == f2.boxes.tobytes()
    other = make_world(tmp_path / "other", seed=4, feature_dim=F, progress=False, **SIZES)
    assert other.dataset.read_bytes() != paths.dataset.read_bytes()
    assert not np.array_equal(np.asarray(Image.open(other.images / "1.png")), np.asarray(Image.open(paths.images / "1.png")))


def test_features_one_region_per_object_plus_distractors(world):
    paths, images = world
    with HDF5FeatureStore(paths.features) as store:
        assert store.feature_dim == F and len(store) == len(images)
        assert store.meta["kind"] == "regions" and store.meta["encoder"] == ENCODER
        for e in images:
            feats = store.get(str(e["cocoid"]))
            kinds = e["regions"]
            assert feats.regions.shape == (len(kinds), F) and feats.boxes.shape == (len(kinds), 4)
            assert kinds.count("object") == len(e["objects"]) and len(kinds) - len(e["objects"]) <= 2
            assert (feats.regions >= 0).all() and np.isfinite(feats.regions).all()
            assert ((feats.boxes >= 0) & (feats.boxes <= 1)).all()
            for obj in e["objects"]:
                assert kinds[obj["region"]] == "object"
                np.testing.assert_allclose(feats.boxes[obj["region"]], obj["box"], atol=1e-4)


def test_qa_answers_are_true(world):
    _, images = world
    for e in images:
        objs = e["objects"]
        for qa in e["qa"]:
            q, a, words = qa["question"], qa["answer"], qa["question"].rstrip("?").split()
            if qa["type"] in ("color", "size"):
                (obj,) = [o for o in objs if o["shape"] == words[-1]]
                assert a == obj["color" if qa["type"] == "color" else "size"], q
            elif qa["type"] == "shape":
                (obj,) = [o for o in objs if o["color"] == words[-2]]
                assert a == obj["shape"], q
            elif qa["type"] == "count":
                noun = words[2]
                n = len(objs) if noun == "objects" else len(
                    [o for o in objs if o["color"] == noun] if noun in COLORS else
                    [o for o in objs if o["shape"] == WORD_TO_SHAPE[noun]])
                assert a == COUNT_WORDS[n], q
            elif qa["type"] == "exists":
                present = any(o["color"] == words[-2] and o["shape"] == words[-1] for o in objs)
                assert a == ("yes" if present else "no"), q
            else:
                (oa,) = _matching(objs, words[2], words[3])
                (ob,) = _matching(objs, words[-2], words[-1])
                rel = [r for w, r in _RELATIONS.items() if " ".join(w) in q][0]
                (xa, ya), (xb, yb) = _centre(oa), _centre(ob)
                truth = {"left": xa < xb, "right": xa > xb, "above": ya < yb, "below": ya > yb}[rel]
                assert a == ("yes" if truth else "no"), q


def test_captions_are_true_of_their_scenes():
    """400 scenes (no files): every noun phrase, count, size and relation checks out."""
    seen_relations = 0
    for image_id in range(1, 401):
        rendering, regions, captions, _, scene = make_image(11, image_id, 64, 4)
        objects = [{"shape": o.shape, "color": o.color, "size": o.size, "box": [float(v) for v in b]}
                   for o, b in zip(scene.objects, rendering.boxes)]
        for raw in captions:
            tokens = ptb_tokenize(raw)
            phrases = check_caption(tokens, objects)
            assert phrases, raw
            seen_relations += any(w in tokens for w in ("left", "right", "above", "over", "below", "under"))
    assert seen_relations > 200


def test_checker_catches_false_captions():
    objs = [{"shape": "circle", "color": "red", "size": "small", "box": [0.1, 0.1, 0.2, 0.2]},
            {"shape": "square", "color": "blue", "size": "large", "box": [0.6, 0.1, 0.9, 0.4]}]
    check_caption(ptb_tokenize("A small red ball to the left of a big blue box."), objs)
    check_caption(ptb_tokenize("A red circle in the top left corner."), objs)
    for wrong in ["A red circle to the right of a blue square.", "Two red circles.", "A red disc on the right.",
                  "A green circle.", "A large red circle.", "A blue square left of a red disc."]:
        with pytest.raises(AssertionError):
            check_caption(ptb_tokenize(wrong), objs)


def test_region_features_carry_colour(world):
    """A nearest-centroid probe reads an object's colour off its region vector (it must attend)."""
    feats, labels = [], []
    for image_id in range(1, 301):
        _, regions, _, _, scene = make_image(5, image_id, 64, 256)
        for obj, row in zip(scene.objects, regions.object_region):
            feats.append(regions.features[row]), labels.append(obj.color)
    x, y = np.stack(feats), np.array(labels)
    half = len(y) // 2
    cents = {c: x[:half][y[:half] == c].mean(0) for c in set(y[:half])}
    names = sorted(cents)
    dist = np.stack([((x[half:] - cents[c]) ** 2).sum(1) for c in names], 1)
    accuracy = (np.array(names)[dist.argmin(1)] == y[half:]).mean()
    assert accuracy > 0.9, accuracy


def test_overwrite_refusal_and_atomic_failure(tmp_path, monkeypatch):
    out = tmp_path / "w"
    out.mkdir()
    make_world(out, num_train=2, num_val=0, num_test=0, feature_dim=4, progress=False)  # empty dir: fine
    before = out.joinpath("dataset_shapes.json").read_bytes()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        make_world(out, num_train=3, num_val=0, num_test=0, feature_dim=4, progress=False)
    assert out.joinpath("dataset_shapes.json").read_bytes() == before

    def boom(*a, **k):
        raise RuntimeError("interrupted")
    monkeypatch.setattr(world_module, "caption_scene", boom)
    with pytest.raises(RuntimeError, match="interrupted"):
        make_world(out, num_train=3, num_val=0, num_test=0, feature_dim=4, progress=False, overwrite=True)
    assert out.joinpath("dataset_shapes.json").read_bytes() == before  # old world untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]  # no temp folders left behind
    monkeypatch.undo()
    make_world(out, num_train=3, num_val=0, num_test=0, feature_dim=4, progress=False, overwrite=True)
    assert len(json.loads(out.joinpath("dataset_shapes.json").read_text())["images"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"]


@pytest.mark.parametrize("kwargs, match", [
    ({"num_train": -1}, "non-negative"), ({"num_train": 0, "num_val": 0, "num_test": 0}, "at least one image"),
    ({"image_size": 8}, "image_size >= 32"), ({"feature_dim": 2.5}, "feature_dim"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_world(tmp_path / "w", progress=False, **kwargs)


def test_overwrite_replaces_only_a_world(tmp_path, capsys):
    """--overwrite replaces a folder catcap synth wrote (plus its CIDEr-D df cache), never one
    holding anything else: those files are refused and left as they were."""
    from catcap.cli.main import main

    small = dict(num_train=2, num_val=0, num_test=0, feature_dim=4, progress=False)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("years of work")
    (notes / "sub").mkdir()
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=r"is not a shapes world.*thesis\.tex.*nothing was changed"):
            make_world(notes, overwrite=overwrite, **small)
    assert sorted(p.name for p in notes.iterdir()) == ["sub", "thesis.tex"]
    assert (notes / "thesis.tex").read_text() == "years of work"
    assert main(["synth", "--out", str(notes), "--train", "2", "--val", "0", "--test", "0",
                 "--feature-dim", "4", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "catcap synth: error:" in err and "not a shapes world" in err and "Traceback" not in err
    assert (notes / "thesis.tex").read_text() == "years of work"

    # a world.json another program wrote is no marker
    other = tmp_path / "other"
    other.mkdir()
    (other / "world.json").write_text('{"generator": "minecraft"}')
    with pytest.raises(FileExistsError, match="not a shapes world"):
        make_world(other, overwrite=True, **small)
    assert (other / "world.json").read_text() == '{"generator": "minecraft"}'

    # a world with the df cache train writes next to the dataset JSON: replaced
    world = tmp_path / "world"
    make_world(world, **small)
    (world / "dataset_shapes.train.0123abcd.cider-df.npz").write_bytes(b"cache")
    with pytest.raises(FileExistsError, match="already holds a shapes world; pass overwrite=True"):
        make_world(world, **small)
    make_world(world, **{**small, "num_train": 3}, overwrite=True)
    assert len(json.loads((world / "dataset_shapes.json").read_text())["images"]) == 3
    assert sorted(p.name for p in world.iterdir()) == ["dataset_shapes.json", "features.h5", "images", "world.json"]

    # a world plus a file of the user's (at the top or among the images): refused, all kept
    for extra in (world / "my_notes.txt", world / "images" / "holiday.jpg"):
        extra.write_text("mine")
        with pytest.raises(FileExistsError, match=rf"plus files that are not part of one \(.*{extra.name}"):
            make_world(world, overwrite=True, **small)
        assert extra.read_text() == "mine"
        assert len(json.loads((world / "dataset_shapes.json").read_text())["images"]) == 3
        extra.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "other", "world"]  # no temp folders
