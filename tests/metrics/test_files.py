"""Bad input gets a clear error that says what was expected and what was found."""

import json

import pytest

from catcap.metrics.errors import MetricInputError
from catcap.metrics.files import load_references, load_results, match_results, parse_references, parse_results


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_results_roundtrip(tmp_path):
    path = write(tmp_path, "r.json", [{"image_id": 1, "caption": "a dog"}, {"image_id": 2, "caption": "a cat"}])
    assert load_results(path) == {1: "a dog", 2: "a cat"}


@pytest.mark.parametrize("data, message", [
    ({"image_id": 1}, "expected a JSON list"),
    ([{"image_id": 1}], "must have keys 'image_id' and 'caption'"),
    ([{"image_id": 1, "caption": 3}], "caption must be a string"),
    ([{"image_id": [1], "caption": "x"}], "image_id must be an integer or a string"),
    ([{"image_id": 7, "caption": "a"}, {"image_id": 7, "caption": "b"}], "duplicate image ids 7"),
    ([], "empty"),
])
def test_bad_results(data, message):
    with pytest.raises(MetricInputError, match=message):
        parse_results(data)


def test_missing_file_non_utf8_and_non_json(tmp_path):
    with pytest.raises(MetricInputError, match="not found"):
        load_results(tmp_path / "nope.json")
    latin = tmp_path / "latin.json"
    latin.write_bytes('[{"image_id": 1, "caption": "caf\xe9"}]'.encode("latin-1"))
    with pytest.raises(MetricInputError, match="not UTF-8.*0xe9"):
        load_results(latin)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"image_id": 1, "caption": "x"}', encoding="utf-8")
    with pytest.raises(MetricInputError, match="not valid JSON.*line 1"):
        load_results(broken)


def test_coco_and_karpathy_references(tmp_path):
    coco = {"annotations": [{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}, {"image_id": 2, "caption": "c"}]}
    assert parse_references(coco) == {1: ["a", "b"], 2: ["c"]}
    karpathy = {"images": [
        {"filename": "x.jpg", "split": "test", "cocoid": 5, "sentences": [{"raw": "A dog.", "tokens": ["a", "dog"]}]},
        {"filename": "x.jpg", "split": "train", "cocoid": 6, "sentences": [{"raw": "x", "tokens": ["x"]}]},
        {"filename": "x.jpg", "split": "test", "imgid": 9, "sentences": [{"tokens": ["two", "cats"]}]},
    ]}
    path = write(tmp_path, "dataset_coco.json", karpathy)
    assert load_references(path, "test") == {5: ["A dog."], 9: ["two cats"]}
    with pytest.raises(MetricInputError, match=r"--split.*test \(2 images\).*train \(1 images\)"):
        load_references(path)
    with pytest.raises(MetricInputError, match="no images in split 'val'"):
        load_references(path, "val")
    with pytest.raises(MetricInputError, match="no splits"):
        parse_references(coco, "test")
    with pytest.raises(MetricInputError, match="expected a COCO annotation file"):
        parse_references([1, 2])


def test_results_for_unknown_images_and_id_type_hint():
    refs = {1: ["a"], 2: ["b"]}
    assert match_results({2: "x"}, refs) == [2]
    with pytest.raises(MetricInputError, match="3 image.*do not contain"):
        match_results({1: "x", 5: "y", 6: "z", 7: "w"}, refs)
    with pytest.raises(MetricInputError, match="string ids, references integer ids"):
        match_results({"1": "x"}, refs)
