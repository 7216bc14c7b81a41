"""Shared helpers for the metrics that run Java jars (METEOR 1.5, SPICE 1.0).

Finds a Java runtime (``CATCAP_JAVA``, then ``JAVA_HOME``, then ``PATH``) and its major
version, finds the jars that pycocoevalcap ships without importing its Python modules
(overridable with ``CATCAP_METEOR_JAR`` / ``CATCAP_SPICE_JAR``), builds small helper jars
from source into the user cache, and checks the ``gts``/``res`` mappings both metrics take.
Everything that cannot work on this machine raises :class:`MetricUnavailable` with a reason
that says how to fix it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Hashable, Mapping, Sequence

from catcap.cache import cache_root
from catcap.metrics.errors import MetricInputError, MetricUnavailable

ENV_JAVA = "CATCAP_JAVA"
ENV_METEOR_JAR = "CATCAP_METEOR_JAR"
ENV_SPICE_JAR = "CATCAP_SPICE_JAR"
MIN_JAVA = 8
INSTALL_JAVA = (
    "install a Java runtime >= 8 (e.g. `apt-get install openjdk-17-jre-headless`), "
    f"or point JAVA_HOME or {ENV_JAVA} at one"
)
INSTALL_JARS = "pip install 'catcap[java]'"
_EXE = ".exe" if os.name == "nt" else ""


class JavaProcessError(MetricUnavailable):
    """A Java process that died, timed out or answered nonsense; ``reason`` holds the
    tail of its stderr. A subclass of MetricUnavailable so that reports still show every
    other metric."""


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_java(metric: str) -> str:
    """Path of the ``java`` to run: ``$CATCAP_JAVA`` (a java binary or a Java home), else
    ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    override = os.environ.get(ENV_JAVA)
    if override:
        path = Path(override)
        candidate = path / "bin" / f"java{_EXE}" if path.is_dir() else path
        if _executable(candidate):
            return str(candidate)
        if os.sep not in override and shutil.which(override):  # a bare command name
            return shutil.which(override)
        raise MetricUnavailable(metric, f"{ENV_JAVA}={override} is not a java executable nor a Java home; "
                                        f"fix or unset it, or {INSTALL_JAVA}")
    home = os.environ.get("JAVA_HOME")
    if home and _executable(Path(home) / "bin" / f"java{_EXE}"):
        return str(Path(home) / "bin" / f"java{_EXE}")
    on_path = shutil.which("java")
    if on_path:
        return on_path
    where = f"not in JAVA_HOME={home}/bin nor on PATH" if home else "not on PATH and JAVA_HOME is not set"
    raise MetricUnavailable(metric, f"no `java` found ({where}); {INSTALL_JAVA}")


def _parse_major(text: str) -> int | None:
    """Major version from ``java -version`` / ``javac -version`` output ("1.8.0_101" -> 8,
    "17.0.15" -> 17, "21-ea" -> 21)."""
    match = re.search(r'(?:version "|javac )(\d+)(?:\.(\d+))?', text)
    if not match:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


@functools.lru_cache(maxsize=16)
def _version_of(tool: str, mtime: float) -> int | None:
    try:
        proc = subprocess.run([tool, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _parse_major(proc.stderr + proc.stdout)


def tool_major_version(tool: str) -> int | None:
    """Major version of a ``java`` or ``javac`` binary, None when it cannot be run."""
    try:
        return _version_of(tool, os.stat(tool).st_mtime)
    except OSError:
        return None


def java_major_version(java: str, metric: str, minimum: int = MIN_JAVA) -> int:
    """Major version of ``java``; MetricUnavailable when it cannot run or is too old."""
    major = tool_major_version(java)
    if major is None:
        raise MetricUnavailable(metric, f"`{java} -version` failed or printed no version; {INSTALL_JAVA}")
    if major < minimum:
        raise MetricUnavailable(metric, f"{java} is Java {major}, {metric} needs Java >= {minimum}; {INSTALL_JAVA}")
    return major


def find_javac(java: str) -> str | None:
    """A ``javac``: next to ``java`` (symlinks resolved), in ``$JAVA_HOME/bin``, or on PATH."""
    homes = [Path(os.path.realpath(java)).parent, Path(java).parent]
    if os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]) / "bin")
    for directory in homes:
        if _executable(directory / f"javac{_EXE}"):
            return str(directory / f"javac{_EXE}")
    return shutil.which("javac")


def pycocoevalcap_dirs() -> list[Path]:
    """Directories of the installed pycocoevalcap (a namespace package), found with
    importlib.util.find_spec, which runs none of its code."""
    try:
        spec = importlib.util.find_spec("pycocoevalcap")
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])]


def find_jar(metric: str, env_var: str, relpath: str) -> Path:
    """The jar named by ``$env_var``, else ``relpath`` inside pycocoevalcap."""
    override = os.environ.get(env_var)
    if override:
        if Path(override).is_file():
            return Path(override).resolve()
        raise MetricUnavailable(metric, f"{env_var}={override} does not exist; fix or unset it")
    for directory in pycocoevalcap_dirs():
        if (directory / relpath).is_file():
            return (directory / relpath).resolve()
    name = Path(relpath).name
    if pycocoevalcap_dirs():
        why = f"pycocoevalcap is installed but has no {relpath}; reinstall it ({INSTALL_JARS})"
    else:
        why = f"{name} comes with pycocoevalcap, which is not installed: {INSTALL_JARS}"
    raise MetricUnavailable(metric, f"{why}, or set {env_var} to the path of {name}")


def user_cache_dir() -> Path:
    """catcap's cache folder (:func:`catcap.cache.cache_root`; not created here)."""
    return cache_root()


def build_jar(metric: str, javac: str, sources: Sequence[Path], resources: Mapping[str, str],
              directory: Path, stem: str, release: int | None = None) -> Path:
    """Compile ``sources`` and pack them with text ``resources`` into ``directory/stem-<hash>.jar``.

    The hash covers sources, resources and ``release``, so an edited source gets a new jar.
    The jar is built in a temporary directory beside its final place and renamed into it,
    so concurrent builders never see half a jar. An existing jar is reused.
    """
    digest = hashlib.sha256(repr(release).encode())
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for name in sorted(resources):
        digest.update(name.encode() + b"\0" + resources[name].encode())
    target = directory / f"{stem}-{digest.hexdigest()[:16]}.jar"
    if target.is_file():
        return target
    try:
        _compile_and_pack(metric, javac, sources, resources, directory, target, release)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise MetricUnavailable(metric, f"could not build {target}: {err}; make the directory writable "
                                        "(or point CATCAP_CACHE_DIR elsewhere)") from err
    return target


def _compile_and_pack(metric: str, javac: str, sources: Sequence[Path], resources: Mapping[str, str],
                      directory: Path, target: Path, release: int | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.stem}-", dir=directory) as tmp:
        classes = Path(tmp) / "classes"
        cmd = [javac, "-nowarn", "-encoding", "UTF-8", "-d", str(classes)]
        cmd += ["--release", str(release)] if release else []
        proc = subprocess.run(cmd + [str(s) for s in sources], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise MetricUnavailable(metric, f"`javac` failed to build {target.name}: {tail(proc.stderr + proc.stdout)}")
        staged = Path(tmp) / target.name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: catcap\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
            for name, text in sorted(resources.items()):
                jar.writestr(name, text)
        os.replace(staged, target)


def tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` non-empty lines of a process's output, for error messages."""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept) if kept else "(no output)"


def check_inputs(metric: str, gts: Mapping[Hashable, Sequence[str]], res: Mapping[Hashable, str]) -> list:
    """Keys of ``gts`` in order, after checking that ``res`` has the same keys, one str
    hypothesis each, and that every image has a non-empty list of str references."""
    if not gts:
        raise MetricInputError(f"{metric}: no images to score (gts is empty)")
    missing = [k for k in gts if k not in res]
    extra = [k for k in res if k not in gts]
    if missing or extra:
        raise MetricInputError(f"{metric}: gts and res must have the same images; "
                               f"missing from res: {missing[:5]}, not in gts: {extra[:5]}")
    for key, refs in gts.items():
        if isinstance(refs, str) or not refs or not all(isinstance(r, str) for r in refs):
            raise MetricInputError(f"{metric}: gts[{key!r}] must be a non-empty list of str, got {refs!r:.80}")
        if not isinstance(res[key], str):
            raise MetricInputError(f"{metric}: res[{key!r}] must be one str hypothesis, got {res[key]!r:.80}")
    return list(gts)
