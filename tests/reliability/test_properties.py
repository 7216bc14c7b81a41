"""Property tests (hypothesis): the tokenizer, the metrics, the config loader, the readers.

Oracles: laws that must hold for every input, not values: the tokenizer never fails on any
text, returns whitespace-free tokens and is idempotent (tokenising its own joined output changes
nothing); every score lies in its range, a candidate equal to all its references scores each
metric's maximum (BLEU 1, ROUGE-L 1, CIDEr-D 10), and reordering an image's references changes
no score; the config loader keeps every valid value and refuses every other one with a
ConfigError; the readers either parse or raise their own ValueError, and keep what they parse.
Deterministic (``derandomize=True``) and small, so a run costs seconds and never flakes."""

import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catcap.config import ConfigError, load_config, to_dict
from catcap.data.karpathy import KarpathyFormatError, parse_karpathy
from catcap.data.text import caption_tokens
from catcap.metrics.evaluate import evaluate_captions
from catcap.metrics.files import MetricInputError, parse_references, parse_results
from catcap.metrics.tokenizer import ptb_tokenize
from catcap.training.experiment import ExperimentConfig

# derandomize: the same examples every run; database=None: nothing written to .hypothesis/
FAST = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
FEW = settings(FAST, max_examples=25)

WORDS = st.sampled_from(["a", "dog", "cat", "runs", "on", "the", "grass", "red", "ball", "two", "men", "sit"])
CAPTION = st.lists(WORDS, min_size=1, max_size=9).map(" ".join)
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
PUNCT_TEXT = st.text(st.sampled_from(list("ab c.,;:'\"()[]{}-!?$%&/\\`~@#*+=<>|^_0123456789\t\nÉéß你")), max_size=40)


# -- tokenizer -----------------------------------------------------------------------------------

@FAST
@given(st.one_of(ANY_TEXT, PUNCT_TEXT))
def test_the_tokenizer_never_fails_and_gives_clean_tokens(text):
    tokens = ptb_tokenize(text)
    assert isinstance(tokens, list) and all(isinstance(t, str) and t and not any(c.isspace() for c in t)
                                            for t in tokens)
    assert caption_tokens(text) == tokens


@FAST
@given(st.one_of(ANY_TEXT, PUNCT_TEXT))
def test_the_tokenizer_is_idempotent(text):
    once = ptb_tokenize(text)
    assert ptb_tokenize(" ".join(once)) == once


# -- metrics -------------------------------------------------------------------------------------

RANGES = {"Bleu_1": 1.0, "Bleu_2": 1.0, "Bleu_3": 1.0, "Bleu_4": 1.0, "ROUGE_L": 1.0, "CIDEr": 10.0}
CORPUS = st.lists(st.tuples(CAPTION, st.lists(CAPTION, min_size=1, max_size=4)), min_size=1, max_size=6)


def _score(corpus):
    results = {i: cand for i, (cand, _) in enumerate(corpus)}
    refs = {i: list(r) for i, (_, r) in enumerate(corpus)}
    return evaluate_captions(results, refs, "bleu,rouge,cider")


@FAST
@given(CORPUS)
def test_every_score_lies_in_its_range(corpus):
    ev = _score(corpus)
    for name, top in RANGES.items():
        assert -1e-12 <= ev.corpus[name] <= top + 1e-9, (name, ev.corpus[name])
        assert all(-1e-12 <= s <= top + 1e-9 for s in ev.per_image[name]), name


@FAST
@given(st.lists(st.tuples(st.lists(WORDS, min_size=3, max_size=8), st.integers(1, 4)), min_size=2, max_size=6))
def test_a_candidate_equal_to_all_its_references_scores_the_maximum(images):
    # a word of its own per image: every n-gram order has a term that is not in every image (idf > 0)
    corpus = [(" ".join(words + [f"w{i}"]), [" ".join(words + [f"w{i}"])] * n) for i, (words, n) in enumerate(images)]
    ev = _score(corpus)
    for name in ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L"):
        assert math.isclose(ev.corpus[name], 1.0, abs_tol=1e-9), (name, ev.corpus[name])
    for s in ev.per_image["CIDEr"]:
        assert math.isclose(s, 10.0, abs_tol=1e-9), s


@FAST
@given(CORPUS, st.randoms(use_true_random=False))
def test_the_order_of_the_references_changes_no_score(corpus, rnd: random.Random):
    shuffled = [(cand, rnd.sample(refs, len(refs))) for cand, refs in corpus]
    a, b = _score(corpus), _score(shuffled)
    for name in RANGES:
        assert math.isclose(a.corpus[name], b.corpus[name], rel_tol=1e-12, abs_tol=1e-12), name
        assert all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12) for x, y in zip(a.per_image[name], b.per_image[name]))


# -- the config loader ---------------------------------------------------------------------------

VALID = st.one_of(
    st.tuples(st.just("train.epochs"), st.integers(1, 10_000)),
    st.tuples(st.just("train.batch_size"), st.integers(1, 4096)),
    st.tuples(st.just("train.seed"), st.integers(0, 2 ** 31)),
    st.tuples(st.just("model.dropout"), st.floats(0.0, 0.99)),
    st.tuples(st.just("train.schedule.lr"), st.floats(0.0, 10.0)),
    st.tuples(st.just("out_dir"), st.text(st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=20)),
)


@FAST
@given(st.lists(VALID, min_size=1, max_size=5, unique_by=lambda kv: kv[0]))
def test_the_config_loader_keeps_every_valid_value_and_round_trips(items):
    cfg = load_config(ExperimentConfig, None, [f"{k}={_text(v)}" for k, v in items])
    data = to_dict(cfg)
    for key, value in items:
        node = data
        for part in key.split("."):
            node = node[part]
        assert node == value, (key, node, value)
    again = load_config(ExperimentConfig, None, [f"{k}={_text(v)}" for k, v in _flat(data)])
    assert to_dict(again) == data


def _text(value) -> str:
    """An override's value as YAML (a string quoted: `out_dir=2024` would be read as a number)."""
    return json.dumps(value, ensure_ascii=False)


def _flat(data, prefix=""):
    for k, v in data.items():
        if isinstance(v, dict) and v:
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


@FAST
@given(st.text(st.characters(whitelist_categories=("L", "N", "P")), min_size=1, max_size=20), ANY_TEXT)
def test_the_config_loader_refuses_what_it_cannot_use_with_a_config_error(key, value):
    try:
        load_config(ExperimentConfig, None, [f"{key}={value}"])
    except ConfigError:
        pass
    except ValueError as err:  # range checks of a valid key: ValueError is what the CLI turns into a message
        assert str(err)


# -- the Karpathy and COCO readers ---------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["images", "split", "sentences", "raw", "tokens", "cocoid", "imgid", "filename",
                                         "annotations", "image_id", "caption", "x"]), inner, max_size=5),
                    max_leaves=20)


@FAST
@given(JSON)
def test_the_readers_parse_or_say_why_never_crash(data):
    for reader, error in ((lambda d: parse_karpathy(d), KarpathyFormatError), (parse_references, MetricInputError),
                          (parse_results, MetricInputError)):
        try:
            reader(data)
        except error:
            pass


SPLIT = st.sampled_from(["train", "val", "test", "restval"])


@FEW
@given(st.lists(st.tuples(SPLIT, st.lists(CAPTION, min_size=1, max_size=3)), min_size=1, max_size=8))
def test_the_karpathy_reader_keeps_every_image_and_caption(images):
    data = {"images": [{"cocoid": 100 + i, "filename": f"{i}.jpg", "split": s, "sentences": [{"raw": c} for c in caps]}
                       for i, (s, caps) in enumerate(images)]}
    grouped = parse_karpathy(data, restval_as_train=False)
    assert sum(len(v) for v in grouped.values()) == len(images)
    for split, records in grouped.items():
        expected = [(100 + i, caps) for i, (s, caps) in enumerate(images) if s == split]
        assert [(r.image_id, r.raw) for r in records] == expected
        assert all(r.captions == [caption_tokens(c) for c in r.raw] for r in records)
    refs = parse_references(data, "test") if any(s == "test" for s, _ in images) else None
    if refs is not None:
        assert refs == {100 + i: caps for i, (s, caps) in enumerate(images) if s == "test"}


@FEW
@given(st.lists(st.tuples(st.integers(0, 20), CAPTION), min_size=1, max_size=15))
def test_the_coco_reader_groups_annotations_by_image_in_order(pairs):
    refs = parse_references({"annotations": [{"image_id": i, "caption": c} for i, c in pairs]})
    expected = {}
    for i, c in pairs:
        expected.setdefault(i, []).append(c)
    assert refs == expected
    unique = {i: c for i, c in pairs}
    assert parse_results([{"image_id": i, "caption": c} for i, c in unique.items()]) == unique


def test_the_property_settings_are_deterministic():
    assert FAST.derandomize and FEW.derandomize
    pytest.importorskip("hypothesis")
