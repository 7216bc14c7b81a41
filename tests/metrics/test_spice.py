"""SPICE 1.0 through pycocoevalcap's jar on modern Java.

Stanford CoreNLP is not available here, so SPICE cannot score end to end unless
CATCAP_CORENLP_DIR points at the two CoreNLP 3.6.0 jars. Everything else runs for real:
the unavailability reasons, the command line, the stand-in JavaScript engine (driven the way
SpiceScorer drives it), SPICE's own LMDB cache class with and without --add-opens, and the
real SPICE jar failing, without CoreNLP, with its stderr shown.

The part after the Java process, reading SPICE's output and aggregating it, runs here without
Java: ``data/spice_output.json`` is the output SPICE 1.0's own code writes (``SpiceStats`` /
``Evaluation`` from the jar, driven by ``SPICE_OUTPUT_PROBE`` below for given tuple counts;
the Java test re-makes it and compares). Its oracles are pycocoevalcap's own reading code on the
same file and the F-scores worked out by hand from the tuple counts.
"""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from catcap.metrics.errors import MetricUnavailable
from catcap.metrics.java import JavaProcessError, find_jar, find_java, java_major_version
from catcap.metrics.spice import (CORENLP_JARS, ENV_CORENLP_DIR, ENV_SPICE_JAR, SPICE_JAR, SPICE_MAIN, engine_jar,
                                  find_corenlp_jars, java_options, run_spice, scores_from_output, spice_command,
                                  spice_score)


def _java_or_none():
    try:
        java = find_java("SPICE")
        return java, java_major_version(java, "SPICE")
    except MetricUnavailable:
        return None, 0


JAVA, MAJOR = _java_or_none()


def needs_java(test):
    """Marks a test `java` and skips it, with a reason, where no Java runtime is found."""
    skip = pytest.mark.skipif(JAVA is None, reason="no Java runtime found (PATH, JAVA_HOME, CATCAP_JAVA); "
                                                   "install e.g. openjdk-17-jdk-headless")
    return pytest.mark.java(skip(test))


@pytest.fixture(scope="module")
def spice_jar():
    pytest.importorskip("pycocoevalcap")
    return find_jar("SPICE", ENV_SPICE_JAR, SPICE_JAR)


def _compile_and_run(tmp_path, source_name, source, classpath, args, options=(), main=None):
    (tmp_path / source_name).write_text(source)
    javac = Path(os.path.realpath(JAVA)).parent / "javac"
    if not javac.exists():
        pytest.skip("no javac next to java to compile the probe")
    subprocess.run([str(javac), "-nowarn", "-cp", os.pathsep.join(classpath), "-d", str(tmp_path),
                    str(tmp_path / source_name)], check=True, capture_output=True)
    cmd = [JAVA, *options, "-cp", os.pathsep.join([str(tmp_path), *classpath]), main or source_name[:-5], *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@needs_java
def test_without_corenlp_spice_is_unavailable_and_says_how_to_fix_it(monkeypatch, tmp_path, spice_jar):
    (tmp_path / "spice-1.0.jar").symlink_to(spice_jar)  # a SPICE whose lib/ has no CoreNLP
    monkeypatch.setenv(ENV_SPICE_JAR, str(tmp_path / "spice-1.0.jar"))
    monkeypatch.delenv(ENV_CORENLP_DIR, raising=False)
    with pytest.raises(MetricUnavailable) as info:
        spice_score({1: ["a man riding a horse"]}, {1: "a man on a horse"})
    assert info.value.metric == "SPICE"
    for needed in (*CORENLP_JARS, ENV_CORENLP_DIR, "corenlp_dir="):
        assert needed in info.value.reason
    (tmp_path / "corenlp").mkdir()
    (tmp_path / "corenlp" / CORENLP_JARS[0]).write_bytes(b"")
    with pytest.raises(MetricUnavailable, match=r"3\.6\.0-models\.jar is not in .*\(corenlp_dir\)"):
        spice_score({1: ["a man"]}, {1: "a man"}, corenlp_dir=tmp_path / "corenlp")


def test_corenlp_jars_come_from_the_argument_then_the_variable_then_spice_lib(monkeypatch, tmp_path):
    dirs = {name: tmp_path / name for name in ("arg", "env", "spice")}
    for directory in (dirs["arg"], dirs["env"], dirs["spice"] / "lib"):
        directory.mkdir(parents=True)
        for name in CORENLP_JARS:
            (directory / name).write_bytes(b"")
    jar = dirs["spice"] / "spice-1.0.jar"
    monkeypatch.setenv(ENV_CORENLP_DIR, str(dirs["env"]))
    assert find_corenlp_jars(jar, dirs["arg"]) == [dirs["arg"] / n for n in CORENLP_JARS]
    assert find_corenlp_jars(jar) == [dirs["env"] / n for n in CORENLP_JARS]
    monkeypatch.delenv(ENV_CORENLP_DIR)
    assert find_corenlp_jars(jar) == [dirs["spice"] / "lib" / n for n in CORENLP_JARS]


def test_the_command_line_runs_spice_with_our_class_path_and_flags(tmp_path):
    spice = tmp_path / "spice" / "spice-1.0.jar"
    corenlp = [tmp_path / "nlp" / n for n in CORENLP_JARS]
    engine = tmp_path / "cache" / "catcap-identity-js-0.jar"
    common = dict(java="java", spice_jar=spice, corenlp_jars=corenlp, input_path=tmp_path / "in.json",
                  output_path=tmp_path / "out.json", cache_dir=tmp_path / "lmdb")
    cmd = spice_command(java_major=17, engine=engine, **common)
    opens = [f"java.base/{p}=ALL-UNNAMED" for p in
             ("java.lang", "java.math", "java.util", "java.util.concurrent", "java.net", "java.text")]
    classpath = os.pathsep.join([str(spice), str(spice.parent / "lib" / "*"), *map(str, corenlp), str(engine)])
    assert cmd == ["java", "-Xmx8G", *[x for o in opens for x in ("--add-opens", o)], "-cp", classpath, SPICE_MAIN,
                   str(tmp_path / "in.json"), "-cache", str(tmp_path / "lmdb"), "-out", str(tmp_path / "out.json"),
                   "-subset", "-silent"]
    old = spice_command(java_major=8, engine=None, java_heap="4G", threads=2, **common)
    assert "--add-opens" not in old and "-Xmx4G" in old and old[-2:] == ["-threads", "2"]
    assert old[old.index("-cp") + 1] == os.pathsep.join(classpath.split(os.pathsep)[:-1])
    assert java_options(8) == [] and java_options(11) == java_options(17)


PROBE = """
import javax.script.ScriptEngine;
import javax.script.ScriptEngineManager;
import javax.script.ScriptException;

public class EngineProbe {
    public static void main(String[] args) throws Exception {
        // exactly what edu.anu.spice.SpiceScorer.scoreBatch does (javap -c spice-1.0.jar)
        ScriptEngineManager manager = new ScriptEngineManager();
        ScriptEngine scriptEngine = manager.getEngineByName("JavaScript");
        if (scriptEngine == null) {
            System.out.println("NO ENGINE");
            return;
        }
        scriptEngine.put("jsonString", args[0]);
        scriptEngine.eval("result = JSON.stringify(JSON.parse(jsonString), null, 2)");
        System.out.println((String) scriptEngine.get("result"));
        for (String name : new String[] {"javascript", "js"}) {
            System.out.println(name + ": " + manager.getEngineByName(name).getFactory().getEngineName());
        }
        try {
            scriptEngine.eval("print('anything else')");
        } catch (ScriptException expected) {
            System.out.println("refused");
        }
    }
}
"""


@needs_java
def test_our_engine_answers_spices_javascript_call(tmp_path):
    if MAJOR < 15:
        assert engine_jar(JAVA, MAJOR, tmp_path) is None  # Nashorn is still there
        pytest.skip(f"Java {MAJOR} has Nashorn; the stand-in engine is for Java >= 15")
    jar = engine_jar(JAVA, MAJOR, cache_root=tmp_path / "cache")
    text = '[{"image_id":0,"scores":{"All":{"f":0.5,"pr":null,"numImages":1}}}]'
    without = _compile_and_run(tmp_path, "EngineProbe.java", PROBE, [], [text])
    assert without.stdout.strip() == "NO ENGINE"  # why SPICE 1.0 crashes on Java >= 15
    run = _compile_and_run(tmp_path, "EngineProbe.java", PROBE, [str(jar)], [text])
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [text, "javascript: catcap identity JSON engine",
                                       "js: catcap identity JSON engine", "refused"]


@needs_java
def test_the_engine_jar_is_built_once_atomically_into_the_user_cache(monkeypatch, tmp_path):
    if MAJOR < 15:
        pytest.skip("no engine needed before Java 15")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jar = engine_jar(JAVA, MAJOR)
    assert jar.parent == tmp_path / "catcap" / "java" and jar.name.startswith("catcap-identity-js-")
    stamp = jar.stat().st_mtime_ns
    assert engine_jar(JAVA, MAJOR) == jar and jar.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in jar.parent.iterdir()) == [jar.name]  # no temporary build left


@needs_java
def test_without_javac_the_reason_says_to_install_a_jdk(monkeypatch, tmp_path):
    if MAJOR < 15:
        pytest.skip("no engine needed before Java 15")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").write_text(f'#!/bin/sh\nexec "{os.path.realpath(JAVA)}" "$@"\n')  # a JRE-like java
    (bin_dir / "java").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(MetricUnavailable, match=r"no `javac`.*jdk-headless"):
        engine_jar(str(bin_dir / "java"), MAJOR, cache_root=tmp_path / "cache")


LMDB_PROBE = """
import java.util.*;
import edu.anu.spice.LmdbTupleDB;

public class LmdbProbe {
    public static void main(String[] args) {
        LmdbTupleDB db = new LmdbTupleDB(args[0]);
        if (args[1].equals("put")) {
            Map<String, ArrayList<ArrayList<String>>> parsed = new HashMap<>();
            ArrayList<ArrayList<String>> tuples = new ArrayList<>();
            tuples.add(new ArrayList<>(Arrays.asList("man", "ride", "horse")));
            parsed.put("a man riding a horse", tuples);
            db.putTransaction(parsed);
        }
        System.out.println(db.getTransaction(Arrays.asList("a man riding a horse", "not cached")));
    }
}
"""


@needs_java
def test_add_opens_make_spices_lmdb_cache_work(tmp_path, spice_jar):
    """SPICE's own cache class (fst serialisation into LMDB), no CoreNLP needed."""
    classpath = [str(spice_jar), str(spice_jar.parent / "lib" / "*")]
    cache = tmp_path / "lmdb"
    cache.mkdir()
    put = _compile_and_run(tmp_path, "LmdbProbe.java", LMDB_PROBE, classpath, [str(cache), "put"],
                           java_options(MAJOR))
    assert put.returncode == 0, put.stderr
    get = _compile_and_run(tmp_path, "LmdbProbe.java", LMDB_PROBE, classpath, [str(cache), "get"],
                           java_options(MAJOR))  # a new JVM reads what the first one cached
    assert get.stdout.strip() == put.stdout.strip() == "{a man riding a horse=[[man, ride, horse]]}"
    if MAJOR >= 16:  # strong encapsulation: without the flags fst cannot even start
        bare = _compile_and_run(tmp_path, "LmdbProbe.java", LMDB_PROBE, classpath, [str(cache), "get"])
        assert bare.returncode != 0 and "InaccessibleObjectException" in bare.stderr


@needs_java
def test_spice_without_corenlp_fails_loading_the_parser_and_shows_why(tmp_path, spice_jar):
    """How far the real SPICE gets on this Java with our flags but no CoreNLP: it stops
    when SpiceParser's static patterns need CoreNLP, before the cache and the output code."""
    (tmp_path / "in.json").write_text(json.dumps([{"image_id": 0, "test": "a man", "refs": ["a man"]}]))
    engine = engine_jar(JAVA, MAJOR, tmp_path / "cache")
    cmd = spice_command(java=JAVA, java_major=MAJOR, spice_jar=spice_jar, corenlp_jars=[], engine=engine,
                        input_path=tmp_path / "in.json", output_path=tmp_path / "out.json",
                        cache_dir=tmp_path / "lmdb", java_heap="1G")
    with pytest.raises(JavaProcessError) as info:
        run_spice(cmd, cwd=tmp_path, timeout=120)
    assert "exited with code 1" in info.value.reason
    assert "NoClassDefFoundError: edu/stanford/nlp/semgraph/semgrex/SemgrexPattern" in info.value.reason
    assert "SpiceParser.<clinit>" in info.value.reason


def test_scores_are_read_back_as_pycocoevalcap_does():
    """SPICE writes null for NaN; values become floats (NaN for null) and the corpus score
    is the mean of the 'All' F-scores, NaN as soon as one is NaN."""
    def item(i, f):
        return {"image_id": i, "scores": {"All": {"f": f, "pr": f, "re": f, "tp": 1, "fp": 0, "fn": 0,
                                                  "numImages": 1}, "Color": {"f": None, "pr": None, "re": None}}}
    corpus, per_image = scores_from_output([item(0, 0.25), item(1, 0.75)], ["b", ("a", 1)])
    assert corpus == 0.5 and list(per_image) == ["b", ("a", 1)]
    assert per_image[("a", 1)]["All"]["f"] == 0.75 and per_image["b"]["All"]["tp"] == 1.0
    assert math.isnan(per_image["b"]["Color"]["f"])
    assert math.isnan(scores_from_output([item(0, 0.25), item(1, None)], [1, 2])[0])
    with pytest.raises(JavaProcessError, match="expected 3"):
        scores_from_output([item(0, 0.25)], [1, 2, 3])


RECORDED_OUTPUT = Path(__file__).parent / "data" / "spice_output.json"

SPICE_OUTPUT_PROBE = """
package edu.anu.spice;

import java.util.HashMap;

/** SPICE 1.0's own output code (SpiceStats.toJSONString over Evaluation objects whose F-scores
 *  Evaluation.calcFScore computes) for given tuple counts: what SpiceScorer writes with -subset
 *  once the parser has matched the tuples, without needing CoreNLP to parse captions. */
public class SpiceOutputProbe {
    static final String[] CATEGORIES = {"All", "Object", "Attribute", "Relation", "Cardinality", "Color", "Size"};
    // per image, per category: true positives, false positives, false negatives
    static final int[][][] COUNTS = {
        {{5, 0, 0}, {3, 0, 0}, {0, 0, 0}, {2, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
        {{1, 2, 7}, {1, 1, 2}, {0, 0, 3}, {0, 1, 2}, {0, 0, 1}, {0, 0, 1}, {0, 0, 0}},
        {{2, 1, 3}, {2, 0, 1}, {0, 0, 0}, {0, 1, 2}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
    };

    public static void main(String[] args) {
        SpiceStats stats = new SpiceStats(new HashMap<String, TupleFilter>(), false);
        for (int i = 0; i < COUNTS.length; ++i) {
            stats.imageIds.add(i);
            HashMap<String, Evaluation> score = new HashMap<String, Evaluation>();
            for (int c = 0; c < CATEGORIES.length; ++c) {
                Evaluation e = new Evaluation();
                e.numImages = 1;
                e.tp = COUNTS[i][c][0];
                e.fp = COUNTS[i][c][1];
                e.fn = COUNTS[i][c][2];
                e.calcFScore(c > 0);  // as SpiceStats.score: NaN allowed for the subsets, not for All
                score.put(CATEGORIES[c], e);
            }
            stats.scores.add(score);
        }
        System.out.println(stats.toJSONString());
    }
}
"""

# The three images of the recorded output, keyed so that sorted order (SPICE's input order) is
# not insertion order: "a" is position 0, "b" 1, "c" 2 (the probe's images 0, 1, 2).
GTS = {"b": ["two cats sleeping on a red couch", "cats asleep on a sofa"],
       "a": ["a man riding a horse on a beach"],
       "c": ["a plate of food with broccoli"]}
RES = {"b": "a dog on a couch", "a": "a man riding a horse on a beach", "c": "a plate of broccoli"}


def _echo_recorded_output(input_path, output_path):
    """What SPICE does with ``input_path``, given the recorded scores: the input's image ids in
    input order, each with the recorded scores of the same position."""
    items = json.loads(Path(input_path).read_text(encoding="utf-8"))
    recorded = json.loads(RECORDED_OUTPUT.read_text(encoding="utf-8"))
    assert len(items) == len(recorded)
    out = [{"image_id": item["image_id"], "scores": scores["scores"]} for item, scores in zip(items, recorded)]
    Path(output_path).write_text(json.dumps(out), encoding="utf-8")


def _catcap_on_recorded_output(monkeypatch, tmp_path):
    """``spice_score(GTS, RES)`` with the Java process replaced by :func:`_echo_recorded_output`."""
    import catcap.metrics.spice as spice

    seen = []

    def fake_run(cmd, *, cwd, timeout):
        seen.append(json.loads(Path(cmd[cmd.index(SPICE_MAIN) + 1]).read_text(encoding="utf-8")))
        _echo_recorded_output(cmd[cmd.index(SPICE_MAIN) + 1], cmd[cmd.index("-out") + 1])

    monkeypatch.setattr(spice, "find_java", lambda metric: "java")
    monkeypatch.setattr(spice, "java_major_version", lambda java, metric: 17)
    monkeypatch.setattr(spice, "find_jar", lambda *args: tmp_path / "spice-1.0.jar")
    monkeypatch.setattr(spice, "find_corenlp_jars", lambda *args: [])
    monkeypatch.setattr(spice, "engine_jar", lambda *args: None)
    monkeypatch.setattr(spice, "run_spice", fake_run)
    corpus, per_image = spice_score(GTS, RES, cache_dir=tmp_path / "lmdb")
    return corpus, per_image, seen[0]


def _pycocoevalcap_on_recorded_output(monkeypatch, tmp_path):
    """pycocoevalcap's ``Spice().compute_score`` on the same output (its download step and its
    Java call replaced; its temporary files go to ``tmp_path``)."""
    toolkit = pytest.importorskip("pycocoevalcap.spice.spice")

    def check_call(cmd, cwd=None):
        _echo_recorded_output(cmd[4], cmd[cmd.index("-out") + 1])

    monkeypatch.setattr(toolkit, "__file__", str(tmp_path / "toolkit" / "spice.py"))
    monkeypatch.setattr(toolkit, "subprocess", type("FakeSubprocess", (), {"check_call": staticmethod(check_call)}))
    scorer = toolkit.Spice.__new__(toolkit.Spice)  # without __init__, which downloads CoreNLP
    corpus, scores = scorer.compute_score({k: v for k, v in GTS.items()}, {k: [v] for k, v in RES.items()})
    return corpus, dict(zip(sorted(GTS), scores))


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_a_recorded_spice_output_is_read_as_pycocoevalcap_reads_it(monkeypatch, tmp_path):
    corpus, per_image, sent = _catcap_on_recorded_output(monkeypatch, tmp_path)
    # SPICE's input: the images in sorted key order, image ids = positions
    assert [(item["image_id"], item["test"], item["refs"]) for item in sent] == [
        (0, RES["a"], GTS["a"]), (1, RES["b"], GTS["b"]), (2, RES["c"], GTS["c"])]
    toolkit_corpus, toolkit_per_image = _pycocoevalcap_on_recorded_output(monkeypatch, tmp_path)
    assert corpus == toolkit_corpus
    assert set(per_image) == set(toolkit_per_image) == {"a", "b", "c"}
    for key in per_image:
        assert per_image[key].keys() == toolkit_per_image[key].keys()
        for category, values in per_image[key].items():
            assert values.keys() == toolkit_per_image[key][category].keys()
            assert all(_same(v, toolkit_per_image[key][category][name]) for name, v in values.items()), (key, category)


def test_recorded_spice_scores_are_the_f_scores_of_the_tuple_counts(monkeypatch, tmp_path):
    """By hand from SPICE's definition (pr = tp / (tp + fp), re = tp / (tp + fn), F1), for the
    tuple counts of the probe: image a (tp 5, fp 0, fn 0), b (1, 2, 7), c (2, 1, 3)."""
    corpus, per_image, _ = _catcap_on_recorded_output(monkeypatch, tmp_path)
    expected_all = {"a": (1.0, 1.0, 1.0), "b": (1 / 3, 1 / 8, 2 / 11), "c": (2 / 3, 2 / 5, 1 / 2)}
    for key, (pr, re, f) in expected_all.items():
        got = per_image[key]["All"]
        assert (got["pr"], got["re"], got["f"]) == pytest.approx((pr, re, f), abs=1e-12)
    assert (per_image["b"]["All"]["tp"], per_image["b"]["All"]["fp"], per_image["b"]["All"]["fn"]) == (1.0, 2.0, 7.0)
    assert corpus == pytest.approx((1.0 + 2 / 11 + 1 / 2) / 3, abs=1e-12)  # mean of the images' All F-scores
    assert set(per_image["a"]) == {"All", "Object", "Attribute", "Relation", "Cardinality", "Color", "Size"}
    # a category without reference tuples is NaN (SPICE writes null); with some but no match, 0
    assert math.isnan(per_image["a"]["Color"]["f"]) and math.isnan(per_image["b"]["Size"]["pr"])
    assert per_image["b"]["Color"]["f"] == 0.0
    assert per_image["b"]["Object"]["f"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))  # tp 1, fp 1, fn 2


@needs_java
def test_the_recorded_output_is_what_spices_own_code_writes(tmp_path, spice_jar):
    classpath = [str(spice_jar), str(spice_jar.parent / "lib" / "*")]
    run = _compile_and_run(tmp_path, "SpiceOutputProbe.java", SPICE_OUTPUT_PROBE, classpath, [],
                           main="edu.anu.spice.SpiceOutputProbe")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == json.loads(RECORDED_OUTPUT.read_text(encoding="utf-8"))


@needs_java
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(ENV_CORENLP_DIR),
                    reason=f"set {ENV_CORENLP_DIR} to a directory with {' and '.join(CORENLP_JARS)} to run SPICE")
def test_real_spice_end_to_end(tmp_path):
    gts = {1: ["a man riding a horse on a beach"],
           2: ["two cats sleeping on a red couch", "cats asleep on a sofa"],
           "x": ["a plate of food with broccoli"]}
    res = {1: "a man riding a horse on a beach", 2: "a dog on a couch", "x": "a plate of broccoli"}
    corpus, per_image = spice_score(gts, res, cache_dir=tmp_path / "lmdb", java_heap="4G")
    assert set(per_image) == set(gts)
    assert set(per_image[1]) == {"All", "Object", "Attribute", "Relation", "Cardinality", "Color", "Size"}
    assert per_image[1]["All"]["f"] == pytest.approx(1.0) and 0 <= per_image[2]["All"]["f"] < 1
    assert corpus == pytest.approx(sum(p["All"]["f"] for p in per_image.values()) / 3)
    again, _ = spice_score(gts, res, cache_dir=tmp_path / "lmdb", java_heap="4G")  # now from the cache
    assert again == corpus
