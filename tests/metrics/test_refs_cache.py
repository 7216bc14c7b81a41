"""The reference-file index: same references as a full parse, rebuilt when the file changes."""

import json

import pytest

from catcap.metrics import refs_cache
from catcap.metrics.errors import MetricInputError
from catcap.metrics.files import parse_references
from catcap.metrics.refs_cache import load_wanted_references


def _coco(path, captions):
    anns = [{"image_id": i, "id": n, "caption": c} for n, (i, c) in enumerate(captions)]
    path.write_text(json.dumps({"images": [], "annotations": anns}))
    return path


@pytest.fixture
def small_index(tmp_path, monkeypatch):
    monkeypatch.setenv("CATCAP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(refs_cache, "MIN_BYTES", 1)
    return tmp_path


def test_index_returns_the_wanted_references_and_is_reused(small_index):
    refs = _coco(small_index / "refs.json", [(1, "a dog"), (2, "a cat"), (1, "the dog"), ("1", "string id")])
    assert load_wanted_references(refs, None, [1]) == {1: ["a dog", "the dog"]}
    index = refs_cache.index_path(refs, None)
    assert index.is_file()
    assert load_wanted_references(refs, None, [2, "1"]) == {2: ["a cat"], "1": ["string id"]}
    full = parse_references(json.loads(refs.read_text()))
    assert load_wanted_references(refs, None, list(full)) == full


def test_a_changed_file_of_the_same_size_is_not_read_from_the_old_index(small_index):
    refs = _coco(small_index / "refs.json", [(1, "a dog"), (2, "a cat")])
    assert load_wanted_references(refs, None, [1]) == {1: ["a dog"]}
    _coco(refs, [(1, "a hog"), (2, "a cat")])  # same size, other bytes
    assert load_wanted_references(refs, None, [1]) == {1: ["a hog"]}


def test_an_unknown_id_gets_the_full_parse_and_its_error(small_index):
    from catcap.metrics.files import match_results

    refs = _coco(small_index / "refs.json", [(1, "a dog")])
    found = load_wanted_references(refs, None, ["1"])
    with pytest.raises(MetricInputError, match="string ids, references integer ids"):
        match_results({"1": "a dog"}, found)


def test_bad_files_fail_as_without_the_index(small_index):
    bad = small_index / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MetricInputError, match="not valid JSON"):
        load_wanted_references(bad, None, [1])
    with pytest.raises(MetricInputError, match="not found"):
        load_wanted_references(small_index / "missing.json", None, [1])


def test_switched_off_or_unwritable_cache_still_reads_everything(small_index, monkeypatch):
    refs = _coco(small_index / "refs.json", [(1, "a dog"), (2, "a cat")])
    monkeypatch.setenv("CATCAP_REF_INDEX", "0")
    assert load_wanted_references(refs, None, [1]) == {1: ["a dog"], 2: ["a cat"]}
    assert not refs_cache.index_path(refs, None).exists()
    monkeypatch.delenv("CATCAP_REF_INDEX")
    blocker = small_index / "file"
    blocker.write_text("")
    monkeypatch.setenv("CATCAP_CACHE_DIR", str(blocker))  # a file: the index cannot be written
    assert load_wanted_references(refs, None, [1]) == {1: ["a dog"]}


def test_a_damaged_index_is_rebuilt(small_index):
    refs = _coco(small_index / "refs.json", [(1, "a dog")])
    load_wanted_references(refs, None, [1])
    refs_cache.index_path(refs, None).write_bytes(b"not sqlite")
    assert load_wanted_references(refs, None, [1]) == {1: ["a dog"]}


def test_karpathy_splits_have_their_own_index(small_index):
    data = {"images": [{"filename": f"{i}.jpg", "split": s, "cocoid": i, "sentences": [{"raw": f"{s} {i}"}]}
                       for i, s in [(1, "val"), (2, "test")]]}
    refs = small_index / "karpathy.json"
    refs.write_text(json.dumps(data))
    assert load_wanted_references(refs, "val", [1]) == {1: ["val 1"]}
    assert load_wanted_references(refs, "test", [2]) == {2: ["test 2"]}
    assert refs_cache.index_path(refs, "val") != refs_cache.index_path(refs, "test")
