"""METEOR 1.5 through pycocoevalcap's jar: parity with pycocoevalcap's own wrapper on real
COCO captions, its edge cases, and every way it can be unavailable or fail (real Java, real
processes; the environment variables are the only thing changed)."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from catcap.metrics.errors import MetricInputError, MetricUnavailable
from catcap.metrics.java import JavaProcessError, _parse_major, find_java, pycocoevalcap_dirs
from catcap.metrics import meteor
from catcap.metrics.meteor import MeteorScorer, clean_hypothesis, close_shared, meteor_score, score_line, shared_scorer

TOL = 1e-9


def _java_or_none():
    try:
        return find_java("METEOR")
    except MetricUnavailable:
        return None


JAVA = _java_or_none()


def needs_java(test):
    """Marks a test `java` and skips it, with a reason, where no Java runtime is found."""
    skip = pytest.mark.skipif(JAVA is None, reason="no Java runtime found (PATH, JAVA_HOME, CATCAP_JAVA); "
                                                   "install e.g. openjdk-17-jre-headless")
    return pytest.mark.java(skip(test))


def _tokens(text):
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


@pytest.fixture(scope="module")
def coco_200(coco_sample):
    """200 COCO images: caption 0 (or, for every third image, another image's caption 0, to
    get low scores too) is the hypothesis, the other 4-6 captions the references."""
    images = coco_sample[:200]
    gts = {img["image_id"]: [_tokens(c) for c in img["captions"][1:]] for img in images}
    res = {}
    for n, img in enumerate(images):
        donor = images[(n + 1) % len(images)] if n % 3 == 0 else img
        res[img["image_id"]] = _tokens(donor["captions"][0])
    return gts, res


@pytest.fixture(scope="module")
def toolkit():
    """pycocoevalcap's own Meteor, kept running for the module."""
    Meteor = pytest.importorskip("pycocoevalcap.meteor.meteor").Meteor
    if JAVA is None:
        pytest.skip("no Java runtime")
    meteor = Meteor()
    yield lambda gts, res: meteor.compute_score(gts, {k: [v] for k, v in res.items()})
    meteor.meteor_p.kill()
    meteor.meteor_p.wait()


@pytest.fixture(scope="module")
def scorer():
    if JAVA is None:
        pytest.skip("no Java runtime")
    with MeteorScorer() as s:
        yield s


@needs_java
@pytest.mark.slow
def test_matches_pycocoevalcap_on_200_coco_images(coco_200, toolkit):
    gts, res = coco_200
    corpus, per_image = meteor_score(gts, res)  # a fresh process, as users call it
    ref_corpus, ref_per_image = toolkit(gts, res)
    assert abs(corpus - ref_corpus) <= TOL
    assert list(per_image) == list(gts)
    np.testing.assert_allclose(list(per_image.values()), ref_per_image, rtol=0, atol=TOL)
    assert 0.1 < corpus < 0.5 and min(per_image.values()) < 0.1 < max(per_image.values())
    # the corpus score is Meteor's aggregate of the summed statistics, not a mean
    assert abs(corpus - float(np.mean(ref_per_image))) > 1e-4


@needs_java
def test_edge_cases_match_pycocoevalcap(scorer, toolkit):
    """'|||' in a hypothesis is removed and double spaces collapsed, exactly as pycocoevalcap
    does; an empty hypothesis scores 0 in both (Meteor sees an empty segment)."""
    gts = {1: ["a man riding a horse", "a person on a horse"], 2: ["a dog on a couch"],
           3: ["two cats sleeping"], 4: ["a red bus on the street", "a bus"], 5: ["a plate of food"]}
    res = {1: "a man ||| riding a horse", 2: "", 3: "two  cats   sleeping", 4: "|||", 5: "a plate of food"}
    corpus, per_image = scorer.score(gts, res)
    ref_corpus, ref_per_image = toolkit(gts, res)
    assert abs(corpus - ref_corpus) <= TOL
    np.testing.assert_allclose(list(per_image.values()), ref_per_image, rtol=0, atol=TOL)
    assert per_image[2] == 0.0 and per_image[4] == 0.0 and per_image[5] > 0.9


@needs_java
def test_separators_and_line_breaks_in_references_cannot_break_the_protocol(scorer, toolkit):
    """pycocoevalcap would split a reference holding '|||' into two, and a line break would
    desynchronise its pipe; catcap drops '|||' from references and turns line breaks into
    spaces, so the result equals pycocoevalcap's on the cleaned captions."""
    gts = {"a": ["a man ||| riding a horse", "a person\non a horse"], "b": ["a dog\r\non a couch"]}
    res = {"a": "a man\nriding a horse", "b": "a dog on a sofa"}
    cleaned_gts = {"a": ["a man  riding a horse", "a person on a horse"], "b": ["a dog  on a couch"]}
    cleaned_res = {"a": "a man riding a horse", "b": "a dog on a sofa"}
    ours = scorer.score(gts, res)
    ref_corpus, ref_per_image = toolkit(cleaned_gts, cleaned_res)
    assert abs(ours[0] - ref_corpus) <= TOL
    np.testing.assert_allclose(list(ours[1].values()), ref_per_image, rtol=0, atol=TOL)
    assert all("\n" not in score_line(r, h) for r, h in ((gts[k], res[k]) for k in gts))


def test_cleaning_is_pycocoevalcaps():
    assert clean_hypothesis("a ||| b") == "a b"
    assert clean_hypothesis("a   b") == "a  b"  # one pass of '  ' -> ' ', as in pycocoevalcap
    assert score_line(["r 1", "r|||2"], "h") == "SCORE ||| r 1 ||| r2 ||| h"
    assert score_line(["r"], "") == "SCORE ||| r ||| "


@needs_java
def test_a_scorer_is_reusable_and_restarts_after_close(scorer, coco_200):
    gts, res = coco_200
    small_gts, small_res = dict(list(gts.items())[:20]), dict(list(res.items())[:20])
    first = scorer.score(small_gts, small_res)
    assert scorer.score(small_gts, small_res) == first
    scorer.close()
    assert scorer.score(small_gts, small_res) == first


@needs_java
def test_meteor_score_keeps_one_meteor_per_process_and_ends_it_when_idle(monkeypatch):
    """Scoring several models in one program starts Meteor once (a JVM start is 10-20 s); an idle
    one goes away by itself."""
    monkeypatch.setattr(meteor, "IDLE_CLOSE", 1.0)
    close_shared()  # one made before the patch would keep the default idle time
    gts, res = {1: ["a cat on a mat", "a cat sitting"]}, {1: "a cat on the mat"}
    first = meteor_score(gts, res)
    scorer = shared_scorer()
    pid = scorer._process.proc.pid
    assert meteor_score(gts, res) == first and scorer._process.proc.pid == pid  # the same JVM answered
    deadline = time.monotonic() + 20
    while scorer.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not scorer.running(), "the shared Meteor outlived IDLE_CLOSE"
    close_shared()


@needs_java
def test_the_shared_meteor_follows_the_java_found_now(monkeypatch, tmp_path):
    """A changed CATCAP_JAVA (or PATH, JAVA_HOME) gets a Meteor of that java, not the earlier one."""
    (tmp_path / "java").symlink_to(os.path.realpath(JAVA))
    before = shared_scorer()
    monkeypatch.setenv("CATCAP_JAVA", str(tmp_path / "java"))
    after = shared_scorer()
    assert after is not before and after.command[0] == str(tmp_path / "java") and shared_scorer() is after


def _child_gets_its_own(inherited, answer):
    answer.put(shared_scorer() is not inherited and shared_scorer() is shared_scorer())


@needs_java
def test_a_forked_child_gets_its_own_shared_meteor():
    """A child must not talk to its parent's Meteor through inherited pipes (DataLoader workers,
    multiprocessing): the shared one is per process."""
    import multiprocessing

    parent = shared_scorer()
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_child_gets_its_own, args=(parent, answer))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and answer.get(timeout=5) is True
    assert shared_scorer() is parent


@needs_java
def test_a_dying_jvm_is_reported_with_its_stderr():
    scorer = MeteorScorer(java_heap="1k")  # the JVM refuses to start with this heap
    with pytest.raises(JavaProcessError) as info:
        scorer.score({1: ["a cat"]}, {1: "a cat"})
    assert info.value.metric == "METEOR"
    assert "exited with code" in info.value.reason and "heap" in info.value.reason.lower()
    assert scorer._process is None  # reaped, nothing left running


def _silent_java(tmp_path) -> tuple[Path, Path]:
    """A stand-in ``java`` that reports version 17 and otherwise never answers (it sleeps), and
    a stand-in Meteor jar with its paraphrase table beside it: no real JVM, so whether the
    timeout fires does not depend on how fast the machine starts Java."""
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\nif [ "$1" = "-version" ]; then echo \'openjdk version "17.0.2"\' >&2; exit 0; fi\n'
                    "exec sleep 60\n")
    java.chmod(0o755)
    jar = tmp_path / "meteor" / "meteor-1.5.jar"
    (jar.parent / "data").mkdir(parents=True)
    jar.write_bytes(b"")
    (jar.parent / "data" / "paraphrase-en.gz").write_bytes(b"")
    return java, jar


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in java is a POSIX shell script")
def test_a_process_that_does_not_answer_in_time_is_killed(monkeypatch, tmp_path):
    java, jar = _silent_java(tmp_path)
    monkeypatch.setenv("CATCAP_JAVA", str(java))
    monkeypatch.setenv("CATCAP_METEOR_JAR", str(jar))
    scorer = MeteorScorer(timeout=0.5)
    assert scorer.command[:2] == [str(java), "-Xmx2G"]  # the stand-in is what runs
    with pytest.raises(JavaProcessError, match="no answer within 0.5 s"):
        scorer.score({1: ["a cat"]}, {1: "a cat"})
    assert scorer._process is None  # killed and reaped


def test_no_java_anywhere_is_unavailable_with_a_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("CATCAP_JAVA", raising=False)
    with pytest.raises(MetricUnavailable) as info:
        meteor_score({1: ["a cat"]}, {1: "a cat"})
    assert info.value.metric == "METEOR"
    assert "openjdk-17-jre-headless" in info.value.reason and "JAVA_HOME" in info.value.reason


@needs_java
def test_java_home_and_catcap_java_are_honoured(monkeypatch, tmp_path):
    home = Path(os.path.realpath(JAVA)).parent.parent
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CATCAP_JAVA", raising=False)
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert find_java("METEOR") == str(home / "bin" / "java")
    monkeypatch.setenv("CATCAP_JAVA", str(home))  # a Java home or a java binary
    assert find_java("METEOR") == str(home / "bin" / "java")
    monkeypatch.setenv("CATCAP_JAVA", str(tmp_path / "no-such-java"))
    with pytest.raises(MetricUnavailable, match="CATCAP_JAVA"):
        find_java("METEOR")


@needs_java
def test_missing_jar_or_paraphrase_table_is_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("CATCAP_METEOR_JAR", str(tmp_path / "meteor-1.5.jar"))
    with pytest.raises(MetricUnavailable, match="CATCAP_METEOR_JAR"):
        MeteorScorer()
    (tmp_path / "meteor-1.5.jar").write_bytes(b"")  # a jar without data/paraphrase-en.gz beside it
    with pytest.raises(MetricUnavailable, match="paraphrase-en.gz"):
        MeteorScorer()


def test_jars_are_located_without_importing_pycocoevalcap_modules():
    pytest.importorskip("pycocoevalcap")
    probe = ("import sys; from catcap.metrics.java import find_jar; "
             "print(find_jar('METEOR', 'CATCAP_METEOR_JAR', 'meteor/meteor-1.5.jar')); "
             "print(sorted(m for m in sys.modules if m.startswith('pycocoevalcap')))")
    env = {k: v for k, v in os.environ.items() if k != "CATCAP_METEOR_JAR"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    jar, modules = out.stdout.splitlines()
    assert Path(jar).is_file() and Path(jar).parent.parent in [d.resolve() for d in pycocoevalcap_dirs()]
    assert modules == "[]"


def test_bad_inputs_are_rejected_before_java_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no java needed to reject them
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("CATCAP_JAVA", raising=False)
    with pytest.raises(MetricInputError, match="same images"):
        meteor_score({1: ["a"]}, {2: "a"})
    with pytest.raises(MetricInputError, match="one str"):
        meteor_score({1: ["a"]}, {1: ["a"]})
    with pytest.raises(MetricInputError, match="non-empty list"):
        meteor_score({1: []}, {1: "a"})
    with pytest.raises(MetricInputError, match="no images"):
        meteor_score({}, {})


@pytest.mark.parametrize("text, major", [('java version "1.8.0_101"', 8), ('openjdk version "17.0.15" 2025', 17),
                                         ('openjdk version "21-ea"', 21), ("javac 11.0.2", 11), ("nonsense", None)])
def test_java_versions_are_parsed(text, major):
    assert _parse_major(text) == major

