"""catcap.data.importers: Flickr8k / COCO caption files -> Karpathy-format dicts."""

from __future__ import annotations

import json
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

from catcap.data.importers import DatasetImportError, import_coco, import_flickr8k, write_dataset_json
from catcap.data.karpathy import load_karpathy

REPO = Path(__file__).resolve().parents[2]
FLICKR8K = REPO.parent / "shared" / "data" / "flickr8k"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def small(tmp_path):
    tokens = _write(tmp_path / "tokens.txt", (
        "111_aa.jpg#0\tA dog runs .\n"
        "111_aa.jpg#1\tThe dog's toy.\n"
        "222_bb.jpg#0\tTwo cats sleep\n"
        "333_cc.jpg#0\tA red car .\n"
        "444_dd.jpg#0\tNobody lists me\n"
        "555_ee.jpg#0\t...\n"
        "555_ee.jpg#1\tA bird\n"
    ))
    train = _write(tmp_path / "train.txt", "222_bb.jpg\n111_aa.jpg\n\n555_ee.jpg\n")
    val = _write(tmp_path / "val.txt", "333_cc.jpg\n999_zz.jpg\n")
    return tmp_path, tokens, {"train": train, "val": val}


def test_flickr8k_exact_output(small):
    _, tokens, lists = small
    data = import_flickr8k(tokens, lists)
    assert data["dataset"] == "flickr8k"
    assert data["images"] == [
        {"filename": "111_aa.jpg", "filepath": "", "imgid": 111, "split": "train", "sentids": [0, 1],
         "sentences": [{"raw": "A dog runs .", "tokens": ["a", "dog", "runs"], "imgid": 111, "sentid": 0},
                       {"raw": "The dog's toy.", "tokens": ["the", "dog", "'s", "toy"], "imgid": 111, "sentid": 1}]},
        {"filename": "222_bb.jpg", "filepath": "", "imgid": 222, "split": "train", "sentids": [2],
         "sentences": [{"raw": "Two cats sleep", "tokens": ["two", "cats", "sleep"], "imgid": 222, "sentid": 2}]},
        {"filename": "333_cc.jpg", "filepath": "", "imgid": 333, "split": "val", "sentids": [3],
         "sentences": [{"raw": "A red car .", "tokens": ["a", "red", "car"], "imgid": 333, "sentid": 3}]},
        {"filename": "555_ee.jpg", "filepath": "", "imgid": 555, "split": "train", "sentids": [4],
         "sentences": [{"raw": "A bird", "tokens": ["a", "bird"], "imgid": 555, "sentid": 4}]},
    ]
    report = data["catcap_import"]
    assert report["splits"] == {"train": 3, "val": 1} and report["captions"] == 5
    w = report["warnings"]
    assert len(w) == 3, w
    assert w[0].startswith("1 caption(s) have no word after tokenisation") and "555_ee.jpg: '...'" in w[0]
    assert "1 listed image(s) have no caption" in w[1] and "999_zz.jpg" in w[1]
    assert "1 captioned image(s) are in no split list and are left out: 444_dd.jpg" in w[2]


def test_flickr8k_roundtrip_through_load_karpathy(small):
    tmp, tokens, lists = small
    out = write_dataset_json(tmp / "sub" / "dataset_flickr8k.json", import_flickr8k(tokens, lists))
    splits = load_karpathy(out)
    assert {s: [r.key for r in recs] for s, recs in splits.items()} == {"train": ["111", "222", "555"], "val": ["333"]}
    assert splits["train"][0].captions == [["a", "dog", "runs"], ["the", "dog", "'s", "toy"]]
    assert not list(out.parent.glob("*.tmp"))


def test_flickr8k_unsplit_into_a_split(small):
    _, tokens, lists = small
    data = import_flickr8k(tokens, lists, unsplit="train")
    assert [e["filename"] for e in data["images"] if e["split"] == "train"] == ["111_aa.jpg", "222_bb.jpg", "444_dd.jpg", "555_ee.jpg"]
    assert "put in split 'train'" in data["catcap_import"]["warnings"][2]


def test_flickr8k_images_dir_missing_files_are_listed(small):
    tmp, tokens, lists = small
    (tmp / "imgs").mkdir()
    for name in ("111_aa.jpg", "333_cc.jpg"):
        (tmp / "imgs" / name).write_bytes(b"x")
    data = import_flickr8k(tokens, lists, tmp / "imgs")
    assert [e["filename"] for e in data["images"]] == ["111_aa.jpg", "333_cc.jpg"]
    assert any("2 image(s) have no file in" in w and "222_bb.jpg, 555_ee.jpg" in w for w in data["catcap_import"]["warnings"])
    with pytest.raises(DatasetImportError, match="images folder not found"):
        import_flickr8k(tokens, lists, tmp / "nope")


def test_flickr8k_ids_fall_back_to_sorted_positions(tmp_path):
    tokens = _write(tmp_path / "t.txt", "b.jpg#0\tA cat\na.jpg#0\tA dog\n")
    lists = {"train": _write(tmp_path / "tr.txt", "a.jpg\nb.jpg\n")}
    data = import_flickr8k(tokens, lists)
    assert [(e["filename"], e["imgid"]) for e in data["images"]] == [("a.jpg", 0), ("b.jpg", 1)]
    assert "positions in the sorted file names" in data["catcap_import"]["warnings"][0]


def test_flickr8k_malformed_line_names_the_line(small):
    tmp, _, lists = small
    bad = _write(tmp / "bad.txt", "111_aa.jpg#0\tA dog\n111_aa.jpg A cat without a tab\n")
    with pytest.raises(DatasetImportError, match=r"bad\.txt:2: expected '<image>\.jpg#<k><TAB><caption>'"):
        import_flickr8k(bad, lists)


def test_flickr8k_errors(small):
    tmp, tokens, lists = small
    with pytest.raises(DatasetImportError, match="caption file not found"):
        import_flickr8k(tmp / "missing.txt", lists)
    with pytest.raises(DatasetImportError, match=r"split list for 'val' not found"):
        import_flickr8k(tokens, {"train": lists["train"], "val": tmp / "missing.txt"})
    dup = _write(tmp / "dup.txt", "111_aa.jpg#0\tA dog\n111_aa.jpg#0\tA cat\n")
    with pytest.raises(DatasetImportError, match=r"dup\.txt:2: caption 111_aa\.jpg#0 is given twice \(first at line 1\)"):
        import_flickr8k(dup, lists)
    both = _write(tmp / "both.txt", "111_aa.jpg\n")
    with pytest.raises(DatasetImportError, match=r"'111_aa\.jpg' is in two splits: 'train' .*train\.txt:2\) and 'val' .*both\.txt:1\)"):
        import_flickr8k(tokens, {"train": lists["train"], "val": both})
    twice = _write(tmp / "twice.txt", "111_aa.jpg\n111_aa.jpg\n")
    with pytest.raises(DatasetImportError, match=r"twice\.txt:2: '111_aa\.jpg' is listed twice"):
        import_flickr8k(tokens, {"train": twice})
    other = _write(tmp / "other.txt", "777_x.jpg\n")
    with pytest.raises(DatasetImportError, match="no image is both captioned"):
        import_flickr8k(tokens, {"train": other})


# -- COCO ---------------------------------------------------------------------------------

def _coco(path: Path, subset: str, images: dict[int, list[str]]) -> Path:
    data = {"images": [{"id": i, "file_name": f"COCO_{subset}_{i:012d}.jpg"} for i in images],
            "annotations": [{"id": 100 * i + j, "image_id": i, "caption": c}
                            for i, caps in images.items() for j, c in reversed(list(enumerate(caps)))]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_coco_small_exact(tmp_path):
    a = _coco(tmp_path / "captions_train2014.json", "train2014", {9: ["A cat.", "Two cats"], 3: ["A dog"]})
    b = _coco(tmp_path / "captions_val2014.json", "val2014", {5: ["A bus "], 7: ["A car"], 8: []})
    val = _write(tmp_path / "val.txt", "5\n")
    test = _write(tmp_path / "test.txt", "COCO_val2014_000000000007.jpg\n12345\n")
    data = import_coco([a, b], {"val": val, "test": test})
    assert data["images"] == [
        {"filepath": "train2014", "filename": "COCO_train2014_000000000003.jpg", "imgid": 0, "split": "train",
         "sentids": [0], "sentences": [{"raw": "A dog", "tokens": ["a", "dog"], "imgid": 0, "sentid": 0}], "cocoid": 3},
        {"filepath": "val2014", "filename": "COCO_val2014_000000000005.jpg", "imgid": 1, "split": "val",
         "sentids": [1], "sentences": [{"raw": "A bus", "tokens": ["a", "bus"], "imgid": 1, "sentid": 1}], "cocoid": 5},
        {"filepath": "val2014", "filename": "COCO_val2014_000000000007.jpg", "imgid": 2, "split": "test",
         "sentids": [2], "sentences": [{"raw": "A car", "tokens": ["a", "car"], "imgid": 2, "sentid": 2}], "cocoid": 7},
        {"filepath": "train2014", "filename": "COCO_train2014_000000000009.jpg", "imgid": 3, "split": "train",
         "sentids": [3, 4], "sentences": [{"raw": "A cat.", "tokens": ["a", "cat"], "imgid": 3, "sentid": 3},
                                          {"raw": "Two cats", "tokens": ["two", "cats"], "imgid": 3, "sentid": 4}],
         "cocoid": 9},
    ]
    w = " | ".join(data["catcap_import"]["warnings"])
    assert "1 listed image(s) are in none of the caption files" in w and "12345" in w
    assert "3 image(s) are in no split list and are put in split 'train'" in w
    assert "1 image(s) have no caption and are left out: COCO_val2014_000000000008.jpg" in w
    only = import_coco([a, b], {"val": val}, unlisted_split=None)
    assert [(e["cocoid"], e["split"]) for e in only["images"]] == [(5, "val")]


def test_coco_errors(tmp_path):
    a = _coco(tmp_path / "a.json", "train2014", {1: ["A cat"]})
    with pytest.raises(DatasetImportError, match="COCO caption file not found"):
        import_coco([tmp_path / "none.json"])
    with pytest.raises(DatasetImportError, match=r"image id 1 .* is also in"):
        import_coco([a, a])
    bad = _write(tmp_path / "bad.json", "{\n\"images\": [}\n")
    with pytest.raises(DatasetImportError, match=r"bad\.json:2: not valid JSON"):
        import_coco([bad])
    wrong = _write(tmp_path / "wrong.json", json.dumps({"images": []}))
    with pytest.raises(DatasetImportError, match="expected a COCO captions file"):
        import_coco([wrong])


def _coco_caption_file(split: str) -> Path:
    """captions_{split}2014.json from benchmarks/_work, extracted from pycocoevalcap's SPICE jar if needed."""
    path = REPO / "benchmarks" / "_work" / f"captions_{split}2014.json"
    if path.exists():
        return path
    spec = find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("real COCO captions unavailable: pycocoevalcap (which ships them in its SPICE jar) is not installed")
    jar = Path(list(spec.submodule_search_locations)[0]) / "spice" / "spice-1.0.jar"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(jar) as z:
            tmp = path.with_suffix(".part")
            tmp.write_bytes(z.read(f"coco/annotations/captions_{split}2014.json"))
            tmp.replace(path)
    except (OSError, KeyError, zipfile.BadZipFile) as err:
        pytest.skip(f"real COCO captions unavailable: cannot extract them from {jar} ({err})")
    return path


def test_coco_real_val2014_subset(tmp_path):
    """The real captions_val2014.json, cut to 300 images to stay fast."""
    full = json.loads(_coco_caption_file("val").read_text(encoding="utf-8"))
    images = sorted(full["images"], key=lambda i: i["id"])[:300]
    keep = {i["id"] for i in images}
    sub = {"images": images, "annotations": [a for a in full["annotations"] if a["image_id"] in keep]}
    path = _write(tmp_path / "captions_val2014.json", json.dumps(sub))
    ids = [i["id"] for i in images]
    val = _write(tmp_path / "val.txt", "\n".join(map(str, ids[:100])) + "\n")
    test = _write(tmp_path / "test.txt", "\n".join(i["file_name"] for i in images[100:200]) + "\n")
    data = import_coco([path], {"val": val, "test": test})
    assert data["catcap_import"]["splits"] == {"test": 100, "train": 100, "val": 100}
    out = write_dataset_json(tmp_path / "dataset_coco.json", data)
    splits = load_karpathy(out)
    assert [r.image_id for r in splits["val"]] == ids[:100]
    assert all(5 <= len(r.captions) <= 7 for s in splits.values() for r in s)
    assert splits["val"][0].filename.startswith("COCO_val2014_") and splits["val"][0].extra["filepath"] == "val2014"


# -- the real Flickr8k ---------------------------------------------------------------------

def test_flickr8k_real():
    if not (FLICKR8K / "Flickr8k.token.txt").exists():
        pytest.skip(f"the real Flickr8k is not at {FLICKR8K} (expected Flickr8k.token.txt, "
                    f"Flickr_8k.trainImages.txt, Flickr_8k.devImages.txt, images/)")
    data = import_flickr8k(FLICKR8K / "Flickr8k.token.txt",  # its speed: benchmarks/flickr8k_data.py
                           {"train": FLICKR8K / "Flickr_8k.trainImages.txt", "val": FLICKR8K / "Flickr_8k.devImages.txt"},
                           FLICKR8K / "images")
    report = data["catcap_import"]
    assert report["splits"] == {"train": 6000, "val": 1000} and report["captions"] == 35000
    assert report["warnings"] == []
    assert all(len(e["sentences"]) == 5 for e in data["images"])
    first = data["images"][0]
    assert first["filename"] == "1000268201_693b08cb0e.jpg" and first["imgid"] == 1000268201
