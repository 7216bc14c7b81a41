"""One result format through the chain (issue 42): what `catcap caption` writes (JSON Lines,
or `--json`'s list, of {"image", "image_id", "caption"}) is read by everything that reads COCO
result files, and a record with only its "image" path gets its id from the reference file's
file names, else from the file name the way `catcap import` numbers images."""

import json

import pytest

from catcap.metrics.errors import MetricInputError
from catcap.metrics.files import load_result_pair, load_results
from catcap.metrics.result_ids import ImageIds, id_from_file_name, id_from_key, reference_file_ids


def lines(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


KARPATHY = {"images": [
    {"filename": "1000268201_693b08cb0e.jpg", "imgid": 1000268201, "split": "val", "sentences": [{"raw": "a girl"}]},
    {"filename": "COCO_val2014_000000391895.jpg", "filepath": "val2014", "cocoid": 391895, "imgid": 0,
     "split": "val", "sentences": [{"raw": "a man"}]},
    {"filename": "holiday.jpg", "imgid": 7, "split": "val", "sentences": [{"raw": "a beach"}]},
]}


@pytest.mark.parametrize("name, expected", [
    ("photos/1000268201_693b08cb0e.jpg", 1000268201),   # Flickr photo id (catcap import flickr8k)
    ("12.png", 12),                                     # the shapes world's images/<id>.png
    ("COCO_val2014_000000391895.jpg", 391895),          # COCO's own id (catcap import coco)
    ("holiday.jpg", None), ("IMG_2041.JPG", None),
])
def test_the_file_name_rule_is_the_importers(name, expected):
    assert id_from_file_name(name) == expected


def test_the_reference_file_names_come_first_and_keys_are_ids():
    ids = ImageIds.from_references(KARPATHY, "refs.json")
    assert ids.of("somewhere/holiday.jpg") == 7 and ids.of("x/val2014/COCO_val2014_000000391895.jpg") == 391895
    assert ids.of("elsewhere/999_abc.jpg") == 999 and ids.of("IMG_1.jpg") is None
    assert reference_file_ids({"images": [{"id": 5, "file_name": "a.jpg"}], "annotations": []}) == {"a.jpg": 5}
    assert id_from_key("1000268201") == 1000268201 and id_from_key("img_3") == "img_3"


def test_caption_json_lines_and_json_lists_read_like_coco_results(tmp_path):
    rows = [{"image": "p/1000268201_693b08cb0e.jpg", "image_id": 1000268201, "caption": "a girl"},
            {"image": "p/2.jpg", "image_id": 2, "caption": "a dog"}]
    assert load_results(lines(tmp_path / "c.jsonl", rows)) == {1000268201: "a girl", 2: "a dog"}
    (tmp_path / "c.json").write_text(json.dumps(rows), encoding="utf-8")  # catcap caption --json
    assert load_results(tmp_path / "c.json") == {1000268201: "a girl", 2: "a dog"}
    one = lines(tmp_path / "one.jsonl", rows[:1])  # a single line is a JSON document too
    assert load_results(one) == {1000268201: "a girl"}
    # JSON Lines under another name: recognised by its second object
    assert load_results(lines(tmp_path / "c.txt", rows)) == {1000268201: "a girl", 2: "a dog"}


def test_records_without_ids_take_them_from_the_references_or_the_file_name(tmp_path):
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps(KARPATHY), encoding="utf-8")
    old = lines(tmp_path / "old.jsonl", [{"image": "p/1000268201_693b08cb0e.jpg", "caption": "a girl"},
                                         {"image": "p/holiday.jpg", "caption": "a beach"}])
    assert load_results(old, refs) == {1000268201: "a girl", 7: "a beach"}
    with pytest.raises(MetricInputError, match=r"entry 1 \(image 'p/holiday.jpg'\) has no image_id.*--refs"):
        load_results(old)
    a, b = load_result_pair(old, old, "a test", refs)
    assert a == b


@pytest.mark.parametrize("rows, message", [
    ([{"image": "p/1.jpg", "image_id": 1, "caption": None, "error": "UnidentifiedImageError: ..."}],
     r"entry 0 \(image 'p/1.jpg'\) has no caption: the image could not be read \(UnidentifiedImageError"),
    ([{"image": "p/1.jpg", "caption": "a"}, {"image": "q/1.jpg", "caption": "b"}], "duplicate image ids 1"),
])
def test_unusable_caption_records_are_refused_clearly(tmp_path, rows, message):
    with pytest.raises(MetricInputError, match=message):
        load_results(lines(tmp_path / "c.jsonl", rows))


def test_a_broken_json_lines_file_names_its_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"image_id": 1, "caption": "a"}\n{"image_id": 2, "caption": \n', encoding="utf-8")
    with pytest.raises(MetricInputError, match="line 2 is not JSON"):
        load_results(path)
