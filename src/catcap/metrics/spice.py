"""SPICE 1.0 through the jar that pycocoevalcap 1.2 ships (``pip install 'catcap[java]'``).

SPICE needs Stanford CoreNLP 3.6.0 (``stanford-corenlp-3.6.0.jar`` and
``stanford-corenlp-3.6.0-models.jar``), which pycocoevalcap downloads into its ``spice/lib``
at first use. catcap never downloads: pass ``corenlp_dir=`` or set ``CATCAP_CORENLP_DIR`` to
a directory holding the two jars (jars already in ``spice/lib`` are used too). catcap runs
``java -cp spice-1.0.jar:lib/*:<corenlp jars> edu.anu.spice.SpiceScorer`` itself instead of
``java -jar``, so nothing has to be copied into site-packages.

Two fixes let SPICE 1.0 (built for Java 8) run on Java 17:

- its LMDB parse cache serialises with fst 2.47, which reflects into JDK internals: on
  Java >= 9 the needed packages are opened with ``--add-opens``;
- it pretty-prints its JSON output with the JavaScript engine, which Java 15 removed: on
  Java >= 15 a tiny engine of catcap's own (``metrics/java/*.java``, compiled with ``javac``
  into the user cache at first use) is put on the class path, where ScriptEngineManager
  finds it as a service.

The scores are pycocoevalcap's ``Spice().compute_score``: the corpus score is the mean of the
per-image ``All`` F-scores (NaN if any is NaN), per-image values go through ``float`` with
NaN for anything else (SPICE writes null for NaN).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Hashable, Mapping, Sequence, TypeVar

import numpy as np

from catcap.metrics.errors import MetricUnavailable
from catcap.metrics.java import (ENV_SPICE_JAR, JavaProcessError, build_jar, check_inputs, find_jar, find_java,
                                 find_javac, java_major_version, tail, tool_major_version, user_cache_dir)

K = TypeVar("K", bound=Hashable)

METRIC = "SPICE"
SPICE_JAR = "spice/spice-1.0.jar"
SPICE_MAIN = "edu.anu.spice.SpiceScorer"  # the Main-Class of spice-1.0.jar's manifest
ENV_CORENLP_DIR = "CATCAP_CORENLP_DIR"
CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
# Packages fst (the LMDB cache's serialiser) reflects into; opened on Java >= 9.
ADD_OPENS = ("java.lang", "java.math", "java.util", "java.util.concurrent", "java.net", "java.text")
NO_JAVASCRIPT_FROM = 15  # Nashorn is gone from this Java version on
ENGINE_SOURCES = ("IdentityScriptEngine.java", "IdentityScriptEngineFactory.java")
ENGINE_SERVICE = {"META-INF/services/javax.script.ScriptEngineFactory": "catcap.spice.IdentityScriptEngineFactory\n"}


def find_corenlp_jars(spice_jar: Path, corenlp_dir: str | os.PathLike | None = None) -> list[Path]:
    """The two CoreNLP 3.6.0 jars from ``corenlp_dir``, else ``$CATCAP_CORENLP_DIR``, else
    the SPICE jar's ``lib/`` (where pycocoevalcap's own downloader puts them)."""
    chosen = corenlp_dir if corenlp_dir is not None else os.environ.get(ENV_CORENLP_DIR) or None
    directory = Path(chosen) if chosen is not None else spice_jar.parent / "lib"
    jars = [directory / name for name in CORENLP_JARS]
    missing = [jar.name for jar in jars if not jar.is_file()]
    if not missing:
        return jars
    origin = ("corenlp_dir" if corenlp_dir is not None else ENV_CORENLP_DIR) if chosen is not None else "SPICE's lib"
    raise MetricUnavailable(METRIC, (
        f"SPICE needs Stanford CoreNLP 3.6.0, but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
        f"not in {directory} ({origin}). Get both jars from stanford-corenlp-full-2015-12-09.zip, then pass "
        f"--corenlp DIR (Python: corenlp_dir=DIR) or set {ENV_CORENLP_DIR}=DIR (a directory holding {CORENLP_JARS[0]} and "
        f"{CORENLP_JARS[1]}), or copy them into {spice_jar.parent / 'lib'}"))


def java_options(java_major: int) -> list[str]:
    """``--add-opens`` flags for the LMDB cache (none before Java 9, which has no modules)."""
    if java_major < 9:
        return []
    return [flag for package in ADD_OPENS for flag in ("--add-opens", f"java.base/{package}=ALL-UNNAMED")]


def engine_jar(java: str, java_major: int, cache_root: Path | None = None) -> Path | None:
    """The jar with catcap's stand-in JavaScript engine, built at first use into
    ``<user cache>/java/``; None where Java still has Nashorn (before Java 15)."""
    if java_major < NO_JAVASCRIPT_FROM:
        return None
    javac = find_javac(java)
    if javac is None:
        raise MetricUnavailable(METRIC, (
            f"Java {java_major} has no JavaScript engine, which SPICE 1.0 uses to write its output; catcap "
            "builds a small replacement at first use but found no `javac` (next to java, in JAVA_HOME or on PATH): "
            f"install a JDK (e.g. `apt-get install openjdk-{java_major}-jdk-headless`) or run SPICE on Java 8-14"))
    javac_major = tool_major_version(javac)
    release = java_major if javac_major is not None and javac_major > java_major else None
    sources = [Path(__file__).parent / "java" / name for name in ENGINE_SOURCES]
    directory = (cache_root or user_cache_dir()) / "java"
    return build_jar(METRIC, javac, sources, ENGINE_SERVICE, directory, "catcap-identity-js", release)


def spice_command(*, java: str, java_major: int, spice_jar: Path, corenlp_jars: Sequence[Path],
                  engine: Path | None, input_path: Path, output_path: Path, cache_dir: Path,
                  java_heap: str = "8G", threads: int | None = None) -> list[str]:
    """The java command line that scores ``input_path`` into ``output_path`` (with
    per-category subsets, quiet, parses cached in ``cache_dir``)."""
    classpath = [str(spice_jar), str(spice_jar.parent / "lib" / "*"), *map(str, corenlp_jars)]
    classpath += [str(engine)] if engine is not None else []
    cmd = [java, f"-Xmx{java_heap}", *java_options(java_major), "-cp", os.pathsep.join(classpath), SPICE_MAIN,
           str(input_path), "-cache", str(cache_dir), "-out", str(output_path), "-subset", "-silent"]
    return cmd + (["-threads", str(threads)] if threads else [])


def run_spice(cmd: Sequence[str], *, cwd: Path, timeout: float | None) -> None:
    """Run SPICE; a JavaProcessError with the tail of its output when it fails."""
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise JavaProcessError(METRIC, f"SPICE did not finish within {timeout:g} s and was killed; "
                                       "pass a larger timeout=") from None
    except OSError as err:
        raise MetricUnavailable(METRIC, f"could not start {cmd[0]}: {err}") from err
    if proc.returncode != 0:
        output = proc.stdout.decode("utf-8", "replace")
        raise JavaProcessError(METRIC, f"SPICE's Java process exited with code {proc.returncode}:\n{tail(output)}")


def float_or_nan(value) -> float:
    """``float(value)``, NaN for None or anything else that is not a number (as pycocoevalcap)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _ordered(keys: list) -> list:
    """pycocoevalcap scores images in sorted order; keys that do not sort keep theirs."""
    try:
        return sorted(keys)
    except TypeError:
        return keys


def spice_score(gts: Mapping[K, Sequence[str]], res: Mapping[K, str], *,
                corenlp_dir: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                java_heap: str = "8G", threads: int | None = None,
                timeout: float | None = None) -> tuple[float, dict[K, dict[str, dict[str, float]]]]:
    """SPICE 1.0 of captions, equal to pycocoevalcap's.

    gts: references per image; res: one hypothesis per image (same keys). Returns the mean of
    the per-image ``All`` F-scores and, per image, ``{category: {"f", "pr", "re", "tp", "fp",
    "fn", "numImages": float}}`` for All, Object, Attribute, Relation, Cardinality, Color and
    Size. cache_dir: SPICE's LMDB parse cache (default ``<user cache>/spice-cache``).
    Raises MetricUnavailable without Java, the jar or the CoreNLP jars.
    """
    keys = _ordered(check_inputs(METRIC, gts, res))
    java = find_java(METRIC)
    major = java_major_version(java, METRIC)
    spice_jar = find_jar(METRIC, ENV_SPICE_JAR, SPICE_JAR)
    corenlp = find_corenlp_jars(spice_jar, corenlp_dir)
    engine = engine_jar(java, major)
    cache = Path(cache_dir) if cache_dir is not None else user_cache_dir() / "spice-cache"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="catcap-spice-") as tmp:
        work = Path(tmp)
        # image ids are positions, so any hashable key round-trips; SPICE only echoes them
        items = [{"image_id": i, "test": res[k], "refs": list(gts[k])} for i, k in enumerate(keys)]
        (work / "input.json").write_text(json.dumps(items), encoding="utf-8")
        cmd = spice_command(java=java, java_major=major, spice_jar=spice_jar, corenlp_jars=corenlp, engine=engine,
                            input_path=work / "input.json", output_path=work / "output.json", cache_dir=cache,
                            java_heap=java_heap, threads=threads)
        run_spice(cmd, cwd=work, timeout=timeout)
        results = json.loads((work / "output.json").read_text(encoding="utf-8"))
    return scores_from_output(results, keys)


def scores_from_output(results: list[dict], keys: list) -> tuple[float, dict]:
    """Corpus and per-image scores from SPICE's ``-out`` JSON (image ids are positions in ``keys``)."""
    by_position = {int(item["image_id"]): item["scores"] for item in results}
    if sorted(by_position) != list(range(len(keys))):
        raise JavaProcessError(METRIC, f"SPICE's output has {len(by_position)} images, expected {len(keys)}")
    per_image = {k: {category: {name: float_or_nan(v) for name, v in values.items()}
                     for category, values in by_position[i].items()}
                 for i, k in enumerate(keys)}
    # pycocoevalcap averages in SPICE's output order, which is the input order here
    corpus = float(np.mean(np.array([float_or_nan(item["scores"]["All"]["f"]) for item in results])))
    return corpus, per_image
