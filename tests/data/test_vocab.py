import json

import pytest

from catcap.data.vocab import SPECIALS, Vocab, VocabError

CAPTIONS = [["a", "dog", "runs"], ["a", "cat", "sits"], ["a", "dog", "sits"], ["the", "dog"]]


def test_specials_have_distinct_fixed_ids():
    v = Vocab()
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.word(i) for i in range(4)] == list(SPECIALS) == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert len(v) == 4


def test_build_orders_by_count_then_alphabet_and_applies_min_count():
    v = Vocab.build(CAPTIONS, min_count=2)
    # a: 3, dog: 3, sits: 2; cat, runs, the: 1 -> unk
    assert v.tokens == list(SPECIALS) + ["a", "dog", "sits"]
    assert v.id("a") == 4 and v.id("dog") == 5 and v.id("cat") == v.unk_id
    assert Vocab.build(CAPTIONS, min_count=1).tokens[4:] == ["a", "dog", "sits", "cat", "runs", "the"]
    assert Vocab.build(reversed(CAPTIONS), min_count=1) == Vocab.build(CAPTIONS, min_count=1)


def test_build_default_min_count_is_5_and_ignores_special_spellings():
    v = Vocab.build([["x"]] * 5 + [["y"]] * 4 + [["<eos>"]] * 9)
    assert v.tokens[4:] == ["x"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_build_rejects_bad_min_count(bad):
    with pytest.raises(VocabError, match="min_count"):
        Vocab.build(CAPTIONS, min_count=bad)


def test_build_rejects_raw_strings():
    with pytest.raises(VocabError, match="lists of tokens"):
        Vocab.build(["a dog runs"])


def test_encode_truncates_words_before_eos():
    v = Vocab(["a", "dog", "runs"])
    assert v.encode(["a", "dog", "runs"]) == [1, 4, 5, 6, 2]
    assert v.encode(["a", "dog", "runs"], max_len=2) == [1, 4, 5, 2]
    assert v.encode(["a", "dog", "runs"], max_len=0) == [1, 2]
    assert v.encode(["a", "zebra"], add_bos=False) == [4, 3, 2]
    assert v.encode(["a", "zebra"], add_bos=False, add_eos=False) == [4, 3]
    assert v.encode(["<eos>", "<pad>", "a"]) == [1, 3, 3, 4, 2]  # special spellings are words -> unk
    with pytest.raises(VocabError, match="max_len"):
        v.encode(["a"], max_len=-1)
    with pytest.raises(VocabError, match="list of tokens"):
        v.encode("a dog")


def test_decode_stops_at_eos_and_skips_pad_bos():
    v = Vocab(["a", "dog"])
    assert v.decode([1, 4, 5, 2, 4, 0]) == ["a", "dog"]
    assert v.decode([4, 0, 1, 3, 5]) == ["a", "<unk>", "dog"]
    assert v.decode(v.encode(["a", "dog"])) == ["a", "dog"]
    with pytest.raises(IndexError, match="ids 0..5"):
        v.decode([1, 99])


def test_word_and_id():
    v = Vocab(["a"])
    assert v.word(4) == "a" and v.id("a") == 4 and v.id("never") == 3
    assert "a" in v and "never" not in v
    with pytest.raises(IndexError, match="out of range"):
        v.word(5)


def test_constructor_rejects_duplicates_and_specials():
    with pytest.raises(VocabError, match="duplicates: 'a' at ids 4 and 5"):
        Vocab(["a", "a"])
    with pytest.raises(VocabError, match="'<unk>' at ids 3 and 4"):
        Vocab(["<unk>"])
    with pytest.raises(VocabError, match="non-empty string"):
        Vocab(["a", ""])


def test_json_roundtrip_is_atomic(tmp_path):
    v = Vocab.build(CAPTIONS, min_count=1)
    path = tmp_path / "sub" / "vocab.json"
    v.to_json(path)
    assert Vocab.from_json(path) == v
    assert sorted(p.name for p in path.parent.iterdir()) == ["vocab.json"]  # no temp file left
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "catcap.vocab" and data["version"] == 1 and data["tokens"][:4] == list(SPECIALS)


def test_json_keeps_unicode_words(tmp_path):
    v = Vocab(["café", "5\u00a01/2"])
    v.to_json(tmp_path / "v.json")
    assert Vocab.from_json(tmp_path / "v.json").tokens == v.tokens


@pytest.mark.parametrize("data, message", [
    ([1, 2], "format"),
    ({"format": "other", "tokens": []}, "format"),
    ({"format": "catcap.vocab", "version": 2, "tokens": list(SPECIALS)}, "version"),
    ({"format": "catcap.vocab", "version": 1, "tokens": "abc"}, "list of strings"),
    ({"format": "catcap.vocab", "version": 1, "tokens": ["<pad>", "<eos>", "<bos>", "<unk>"]}, "special tokens"),
    ({"format": "catcap.vocab", "version": 1, "tokens": list(SPECIALS) + ["a", "b", "a"]}, "'a' at ids 4 and 6"),
    ({"format": "catcap.vocab", "version": 1, "tokens": list(SPECIALS) + [7]}, "non-empty string"),
])
def test_from_json_validates(tmp_path, data, message):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(VocabError, match=message):
        Vocab.from_json(path)


def test_from_json_bad_files(tmp_path):
    with pytest.raises(VocabError, match="not found"):
        Vocab.from_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(VocabError, match="not UTF-8 JSON"):
        Vocab.from_json(tmp_path / "bad.json")
    (tmp_path / "latin.json").write_bytes(b'{"format": "caf\xe9"}')
    with pytest.raises(VocabError, match="not UTF-8 JSON"):
        Vocab.from_json(tmp_path / "latin.json")
