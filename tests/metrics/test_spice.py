"""SPICE 1.0 through pycocoevalcap's jar on modern Java.

Stanford CoreNLP is not available here, so SPICE cannot score end to end unless
CATCAP_CORENLP_DIR points at the two CoreNLP 3.6.0 jars. Everything else runs for real:
the unavailability reasons, the command line, the stand-in JavaScript engine (driven the way
SpiceScorer drives it), SPICE's own LMDB cache class with and without --add-opens, and the
real SPICE jar failing, without CoreNLP, with its stderr shown.
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


def _compile_and_run(tmp_path, source_name, source, classpath, args, options=()):
    (tmp_path / source_name).write_text(source)
    javac = Path(os.path.realpath(JAVA)).parent / "javac"
    if not javac.exists():
        pytest.skip("no javac next to java to compile the probe")
    subprocess.run([str(javac), "-nowarn", "-cp", os.pathsep.join(classpath), "-d", str(tmp_path),
                    str(tmp_path / source_name)], check=True, capture_output=True)
    cmd = [JAVA, *options, "-cp", os.pathsep.join([str(tmp_path), *classpath]), source_name[:-5], *args]
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
