"""`catcap extract` never loses or strands a store: refused and failed runs, key schemes, bad
input, nothing to do. A tiny fake encoder (extract_fakes.FakeEncoder) stands in for EfficientNet."""

import json

import numpy as np
import pytest
from extract_fakes import TINY_NAMES, FakeEncoder

from catcap.cli.main import main
from catcap.data.features import HDF5FeatureWriter, open_feature_store
from catcap.features.extract import extract_features, read_errors

STEMS = sorted(n.rsplit(".", 1)[0] for n in TINY_NAMES)
IDS = sorted(n.split("_")[0] for n in TINY_NAMES)


def _extract(*args):
    return main(["extract", *map(str, args), "--workers", "0", "--quiet"])


def _dataset(tmp_path, names):
    images = [{"filename": n, "imgid": int(n.split("_")[0]), "split": "train",
               "sentences": [{"raw": "a dog runs on the grass"}]} for n in names]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": images}))
    return path


def _keys(path):
    with open_feature_store(path) as store:
        return sorted(store.keys())


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("catcap extract: error: "), err
    return err


# -- 1. a refused or failed run never strands a finished store at .partial ---------------------

def test_other_encoder_is_refused_briefly_and_the_store_keeps_its_name(tiny_photos, tmp_path, fake_encoders, capsys):
    out = tmp_path / "f.h5"
    assert _extract("--images", tiny_photos, "--out", out) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert _extract("--images", tiny_photos, "--out", out, "--encoder", "efficientnet-lite2") == 2
    err = _error_line(capsys)
    assert "'efficientnet-lite0'" in err and "'efficientnet-lite2'" in err and "mixing encoders" in err
    assert "--restart" in err and "another --out" in err
    assert "{" not in err and len(err) < 400  # no dict dumps
    assert out.read_bytes() == before and not (tmp_path / "f.h5.partial").exists()
    with open_feature_store(out) as store:  # still readable by train/caption
        assert sorted(store.keys()) == STEMS


@pytest.mark.parametrize("content, found", [
    (b"hello, this is not a feature file\n", "not HDF5"),
    (b"", "an empty file"),
    ("truncated", "damaged HDF5 file"),
])
def test_out_that_is_not_a_readable_store_is_refused_untouched(tiny_photos, tmp_path, fake_encoders, capsys,
                                                               content, found):
    out = tmp_path / "f.h5"
    if content == "truncated":
        assert _extract("--images", tiny_photos, "--out", out) == 0
        content = out.read_bytes()[:1000]
        capsys.readouterr()
    out.write_bytes(content)
    assert _extract("--images", tiny_photos, "--out", out) == 2
    err = _error_line(capsys)
    assert found in err and str(out) in err and "--restart" in err and "another --out" in err
    assert out.read_bytes() == content and not (tmp_path / "f.h5.partial").exists()
    # --restart replaces it, as the message says
    assert _extract("--images", tiny_photos, "--out", out, "--restart") == 0
    assert _keys(out) == STEMS


def test_a_crash_while_continuing_a_finished_store_gives_it_its_name_back(tiny_photos, tmp_path):
    out = tmp_path / "f.h5"
    extract_features(sorted(tiny_photos.iterdir())[:1], out, FakeEncoder(), workers=0, progress=False)
    with pytest.raises(RuntimeError, match="simulated crash"):
        extract_features(tiny_photos, out, FakeEncoder(fail_on_call=2), batch_size=1, workers=0, progress=False)
    assert not (tmp_path / "f.h5.partial").exists()
    assert _keys(out) == STEMS[:2]  # the old image plus the one completed before the crash
    rest = extract_features(tiny_photos, out, FakeEncoder(), workers=0, progress=False)
    assert rest.skipped == 2 and rest.extracted == 1 and _keys(out) == STEMS


def test_a_crash_in_a_new_extraction_stays_at_partial_and_is_continued(tiny_photos, tmp_path):
    out = tmp_path / "f.h5"
    with pytest.raises(RuntimeError, match="simulated crash"):
        extract_features(tiny_photos, out, FakeEncoder(fail_on_call=3), batch_size=1, workers=0, progress=False)
    assert not out.exists() and (tmp_path / "f.h5.partial").exists()
    rest = extract_features(tiny_photos, out, FakeEncoder(), workers=0, progress=False)
    assert rest.skipped == 2 and rest.extracted == 1 and _keys(out) == STEMS


# -- 2. one key scheme per store ----------------------------------------------------------------

def test_key_scheme_is_recorded_and_mixing_schemes_is_refused(tiny_photos, tmp_path, fake_encoders, capsys):
    dataset = _dataset(tmp_path, TINY_NAMES)
    stems, ids = tmp_path / "stems.h5", tmp_path / "ids.h5"
    assert _extract("--images", tiny_photos, "--out", stems) == 0
    assert _extract("--images", tiny_photos, "--dataset", dataset, "--out", ids) == 0
    with open_feature_store(stems) as a, open_feature_store(ids) as b:
        assert a.meta["keys"] == "file-stem" and b.meta["keys"] == "image-id"
    capsys.readouterr()

    assert _extract("--images", tiny_photos, "--dataset", dataset, "--out", stems) == 2
    err = _error_line(capsys)
    assert "keyed by file name" in err and "image id" in err and "second time" in err and "--restart" in err
    assert _keys(stems) == STEMS and not (tmp_path / "stems.h5.partial").exists()

    assert _extract("--images", tiny_photos, "--out", ids) == 2  # and the other way round
    assert "keyed by image id" in _error_line(capsys)
    assert _keys(ids) == IDS


def test_a_store_from_before_key_schemes_is_continued(tiny_photos, tmp_path):
    out = tmp_path / "old.h5"
    enc = FakeEncoder()
    with HDF5FeatureWriter(out, enc.channels, enc.meta) as w:  # meta without "keys", as older catcap wrote
        w.write(STEMS[0], np.ones((4, enc.channels)))
    res = extract_features(tiny_photos, out, enc, workers=0, progress=False)
    assert res.skipped == 1 and res.extracted == 2 and _keys(out) == STEMS
    with open_feature_store(out) as store:
        assert "keys" not in store.meta  # the file's meta is left as it was


# -- 5. nothing extracted, --limit, messages ----------------------------------------------------

def test_when_no_image_can_be_read_nothing_is_written_and_the_command_fails(tmp_path, fake_encoders, capsys):
    folder = tmp_path / "broken"
    folder.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (folder / name).write_bytes(b"\xff\xd8\xff not a JPEG at all")
    out = tmp_path / "f.h5"
    assert _extract("--images", folder, "--out", out) == 2
    err = _error_line(capsys)
    assert "none of the 2 images could be read" in err and "nothing was written" in err and "a.jpg" in err
    assert not out.exists() and not (tmp_path / "f.h5.partial").exists()
    assert [p for p, _ in read_errors(out)] == [str(folder / "a.jpg"), str(folder / "b.jpg")]


def test_unreadable_new_images_beside_a_filled_store_are_not_fatal(tiny_photos, tmp_path):
    out = tmp_path / "f.h5"
    extract_features(tiny_photos, out, FakeEncoder(), workers=0, progress=False)
    (tiny_photos / "9_corrupt.jpg").write_bytes(b"junk")
    res = extract_features(tiny_photos, out, FakeEncoder(), workers=0, progress=False)
    assert res.extracted == 0 and res.skipped == 3 and len(res.errors) == 1 and _keys(out) == STEMS


@pytest.mark.parametrize("limit", ["0", "-1", "two"])
def test_limit_below_one_is_refused(tiny_photos, tmp_path, capsys, limit):
    with pytest.raises(SystemExit) as exit_:
        main(["extract", "--images", str(tiny_photos), "--out", str(tmp_path / "f.h5"), "--limit", limit])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "catcap extract: error: argument --limit" in err and ">= 1" in err and repr(limit) in err
    assert not list(tmp_path.glob("f.h5*"))


@pytest.mark.parametrize("limit", [0, -2, True])
def test_limit_below_one_is_refused_by_the_api(tiny_photos, tmp_path, limit):
    with pytest.raises(ValueError, match=r"limit.*>= 1"):
        extract_features(tiny_photos, tmp_path / "f.h5", FakeEncoder(), limit=limit, progress=False)


def test_limit_with_a_dataset_takes_the_dataset_order(tiny_photos, tmp_path, fake_encoders):
    dataset = _dataset(tmp_path, TINY_NAMES[::-1])  # the last file by name comes first
    out = tmp_path / "f.h5"
    assert _extract("--images", tiny_photos, "--dataset", dataset, "--out", out, "--limit", 1) == 0
    assert _keys(out) == [TINY_NAMES[-1].split("_")[0]]


def test_one_unreadable_image_is_reported_in_the_singular(tiny_photos, tmp_path):
    (tiny_photos / "0_corrupt.jpg").write_bytes(b"junk")
    logged = []
    extract_features(tiny_photos, tmp_path / "f.h5", FakeEncoder(), workers=0, progress=False, log=logged.append)
    assert any(m.startswith("1 image could not be read and was skipped") for m in logged), logged


def test_nothing_to_do_says_so_instead_of_empty_progress_bars(tiny_photos, tmp_path, fake_encoders, capsys):
    out = tmp_path / "f.h5"
    assert _extract("--images", tiny_photos, "--out", out) == 0
    capsys.readouterr()
    assert main(["extract", "--images", str(tiny_photos), "--out", str(out), "--workers", "0"]) == 0
    captured = capsys.readouterr()
    assert captured.err == f"nothing to do: all 3 images already in {out}\n"
    assert "0 images extracted" in captured.out and "3 already there" in captured.out
