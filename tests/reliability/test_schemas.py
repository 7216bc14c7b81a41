"""One set of validators for the reference formats (issue 40; catcap/metrics/schemas.py): every
malformed Karpathy file made by taking a key away from an entry, or giving it a value of the
wrong type, is refused by the data layer's reader (prepare, train, extract --dataset), by the
metrics' reader (evaluate, compare, report) and by the reader of the photos' image ids (caption
--refs, evaluate of records that name their photo) with the same message, naming the file, the
entry and the key; likewise the COCO annotations of evaluate, caption --refs and import coco."""

import copy

import pytest

from catcap.data.importers import DatasetImportError
from catcap.data.karpathy import KarpathyFormatError, parse_karpathy
from catcap.metrics.errors import MetricInputError
from catcap.metrics.files import parse_references
from catcap.metrics.result_ids import reference_file_ids
from catcap.metrics.schemas import coco_annotations

GOOD = {"images": [{"filename": f"{i}.jpg", "split": "test", "imgid": i,
                    "sentences": [{"raw": "a dog runs"}, {"tokens": ["a", "cat"]}]} for i in range(3)]}
WRONG = {"imgid": [1.5, True, None], "filename": [3, None], "split": [3, ["test"]], "sentences": ["a dog", {"raw": "x"}]}


def _malformed():
    """(label, data, words the message must hold): every key of an entry missing and wrong, a
    sentence without text, a duplicate id."""
    for key, values in WRONG.items():
        data = copy.deepcopy(GOOD)
        del data["images"][1][key]
        yield f"{key}-missing", data, ("images[1]", key.replace("imgid", "cocoid"))
        for value in values:
            data = copy.deepcopy(GOOD)
            data["images"][1][key] = value
            yield f"{key}={value!r}", data, ("images[1]", key)
    for sentence in ({}, {"raw": 5}, {"tokens": [1]}, "a dog"):
        data = copy.deepcopy(GOOD)
        data["images"][2]["sentences"][1] = sentence
        yield f"sentence={sentence!r}", data, ("images[2] (id 2).sentences[1]", '"raw"')
    data = copy.deepcopy(GOOD)
    data["images"][2]["imgid"] = "0"  # 0 and "0" are one feature-store key
    yield "duplicate-id", data, ("images[0] and images[2]", "more than once")


CASES = list(_malformed())


@pytest.mark.parametrize("label,data,words", CASES, ids=[c[0] for c in CASES])
def test_both_readers_refuse_a_malformed_karpathy_file_alike(label, data, words):
    with pytest.raises(KarpathyFormatError) as by_data:
        parse_karpathy(data, source="d.json")
    with pytest.raises(MetricInputError) as by_metrics:
        parse_references(data, "test", source="d.json")
    with pytest.raises(MetricInputError) as by_ids:
        reference_file_ids(data, source="d.json")
    assert str(by_data.value) == str(by_metrics.value) == str(by_ids.value)
    for word in ("d.json", *words):
        assert word in str(by_data.value), str(by_data.value)


def test_the_good_file_is_read_alike():
    records = parse_karpathy(GOOD)["test"]
    assert parse_references(GOOD, "test") == {r.image_id: r.raw for r in records}


@pytest.mark.parametrize("annotation", [{"caption": "a"}, {"image_id": True, "caption": "a"}, {"image_id": 1},
                                        {"image_id": 1, "caption": 5}, "a dog"])
def test_evaluate_and_import_coco_refuse_an_annotation_alike(annotation):
    data = {"annotations": [{"image_id": 1, "caption": "a dog"}, annotation]}
    with pytest.raises(MetricInputError) as by_metrics:
        parse_references(data, source="c.json")
    with pytest.raises(MetricInputError) as by_ids:
        reference_file_ids(data, source="c.json")
    with pytest.raises(DatasetImportError) as by_import:
        coco_annotations(data, "c.json", DatasetImportError, int_ids=True)
    # the same file, entry and key; import coco also wants the ids as integers (as COCO writes them)
    where = [str(e.value).split(": expected")[0] for e in (by_metrics, by_ids, by_import)]
    assert where[0] == where[1] == where[2] and where[0].startswith("c.json: annotations[1]"), where


@pytest.mark.parametrize("data", [[1, 2], {"imgs": []}, "refs", {"images": 3}])
def test_a_file_of_neither_format_is_refused_alike(data):
    with pytest.raises(MetricInputError) as by_metrics:
        parse_references(data, source="r.json")
    with pytest.raises(MetricInputError) as by_ids:
        reference_file_ids(data, source="r.json")
    assert str(by_metrics.value) == str(by_ids.value) and "expected a COCO annotation file" in str(by_ids.value)
