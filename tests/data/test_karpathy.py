import json

import pytest

from catcap.data.karpathy import ImageRecord, KarpathyFormatError, load_karpathy, parse_karpathy, split_counts
from catcap.data.text import caption_tokens


def _image(imgid, split, raws, cocoid=None, **extra):
    entry = {"filename": f"img{imgid}.jpg", "imgid": imgid, "split": split,
             "sentences": [{"raw": r, "tokens": r.lower().split()} for r in raws], **extra}
    if cocoid is not None:
        entry["cocoid"] = cocoid
    return entry


DATA = {"images": [
    _image(0, "train", ["A dog's toy.", "A DOG plays"], cocoid=100, filepath="train2014", sentids=[0, 1]),
    _image(1, "restval", ["Two cats."], cocoid=101),
    _image(2, "val", ["A red car"], cocoid=102),
    _image(3, "test", ["A man (left) waves!"], cocoid=103),
], "dataset": "coco"}


def write(tmp_path, data, name="dataset_coco.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_load_groups_by_split_with_typed_records(tmp_path):
    got = load_karpathy(write(tmp_path, DATA))
    assert split_counts(got) == {"train": 2, "val": 1, "test": 1}
    rec = got["train"][0]
    assert rec == ImageRecord(100, "img0.jpg", "train", [["a", "dog", "'s", "toy"], ["a", "dog", "plays"]],
                              ["A dog's toy.", "A DOG plays"], {"filepath": "train2014", "sentids": [0, 1]})
    assert rec.key == "100"
    assert got["train"][1].image_id == 101 and got["train"][1].extra == {"karpathy_split": "restval"}


def test_tokens_come_from_raw_like_the_evaluation(tmp_path):
    # the file's own tokens ("(left)", "waves!") are ignored when raw is present
    rec = load_karpathy(write(tmp_path, DATA), "test")["test"][0]
    assert rec.captions == [caption_tokens("A man (left) waves!")] == [["a", "man", "-lrb-", "left", "-rrb-", "waves"]]


def test_tokens_used_when_raw_missing():
    data = {"images": [{"filename": "a.jpg", "imgid": 7, "split": "train",
                        "sentences": [{"tokens": ["a", "big", "dog"]}]}]}
    rec = parse_karpathy(data)["train"][0]
    assert rec.image_id == 7 and rec.captions == [["a", "big", "dog"]] and rec.raw == ["a big dog"]


def test_restval_kept_apart_on_request(tmp_path):
    got = load_karpathy(write(tmp_path, DATA), restval_as_train=False)
    assert split_counts(got) == {"train": 1, "restval": 1, "val": 1, "test": 1}
    assert got["restval"][0].extra == {}


def test_requested_splits_in_order(tmp_path):
    got = load_karpathy(write(tmp_path, DATA), ["test", "train"])
    assert list(got) == ["test", "train"]


def test_empty_requested_split_lists_existing(tmp_path):
    path = write(tmp_path, DATA)
    with pytest.raises(KarpathyFormatError, match=r"no images in split\(s\) 'tset'.*test \(1 images\), train \(2 images\), val"):
        load_karpathy(path, "tset")
    with pytest.raises(KarpathyFormatError, match="restval was merged into train"):
        load_karpathy(path, "restval")


def test_not_json_not_utf8_missing(tmp_path):
    (tmp_path / "bad.json").write_text('{"images": [', encoding="utf-8")
    with pytest.raises(KarpathyFormatError, match="not valid JSON.*line 1"):
        load_karpathy(tmp_path / "bad.json")
    (tmp_path / "latin.json").write_bytes(b'{"images": [{"raw": "caf\xe9"}]}')
    with pytest.raises(KarpathyFormatError, match="not UTF-8.*0xe9.*iconv"):
        load_karpathy(tmp_path / "latin.json")
    with pytest.raises(KarpathyFormatError, match="not found"):
        load_karpathy(tmp_path / "missing.json")


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(DATA).encode())
    assert split_counts(load_karpathy(path)) == {"train": 2, "val": 1, "test": 1}


@pytest.mark.parametrize("data, message", [
    ([], r"expected a Karpathy split file.*found a list"),
    ({"annotations": []}, r"found an object with keys \['annotations'\]"),
    ({"images": [3]}, r"images\[0\]: expected an object, found int"),
    ({"images": [{"filename": "a", "split": "train", "sentences": []}]}, r"images\[0\]: expected an integer \"cocoid\" or \"imgid\""),
    ({"images": [{"imgid": True, "filename": "a", "split": "train", "sentences": []}]}, "cocoid"),
    ({"images": [{"imgid": 1, "split": "train", "sentences": []}]}, r"\"filename\" to be a str, found no such key"),
    ({"images": [{"imgid": 1, "filename": "a", "split": 3, "sentences": []}]}, r"\"split\" to be a str"),
    ({"images": [{"imgid": 1, "filename": "a", "split": "train", "sentences": "x"}]}, r"\"sentences\" to be a list"),
    ({"images": [{"imgid": 1, "filename": "a", "split": "train", "sentences": [{"raw": 5}]}]},
     r"images\[0\] \(id 1\).sentences\[0\]: expected an object with a string \"raw\""),
    ({"images": [_image(1, "train", ["a"]), _image(1, "val", ["b"])]}, r"one entry per image id.*id 1 \(images\[0\] and images\[1\]\)"),
])
def test_schema_errors(data, message):
    with pytest.raises(KarpathyFormatError, match=message):
        parse_karpathy(data)


def test_images_without_sentences_load(tmp_path):
    # validate_dataset reports them before a run; loading keeps them (e.g. for captioning new images)
    got = parse_karpathy({"images": [{"imgid": 1, "filename": "a.jpg", "split": "test", "sentences": []}]})
    assert got["test"][0].captions == [] and got["test"][0].raw == []
