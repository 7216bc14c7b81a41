"""METEOR 1.5 through the jar that pycocoevalcap 1.2 ships (``pip install 'catcap[java]'``).

The numbers are pycocoevalcap's ``Meteor().compute_score``: the same jar and paraphrase
table, the same command (``java -Xmx2G -jar meteor-1.5.jar - - -stdio -l en -norm``) and
the same ``-stdio`` protocol:

- ``SCORE ||| ref 1 ||| ... ||| ref n ||| hypothesis`` answers one line of statistics;
- ``EVAL ||| stats 1 ||| ... ||| stats N`` answers N per-image scores, then the corpus
  score, which is Meteor's own aggregate of the summed statistics (not the mean of the
  per-image scores).

Hypotheses are cleaned exactly as pycocoevalcap does (``'|||'`` removed, then ``'  '`` ->
``' '``). Beyond that, line breaks in any caption become spaces and ``'|||'`` is removed
from references too, since either would break the line protocol (pycocoevalcap would split
such a reference into several, or hang). All SCORE lines are written by a writer thread
while the answers are read, so no pipe can fill up and deadlock; Meteor answers each line
in order, so the numbers are the same as writing one line at a time. stderr is kept for
error messages, a watchdog kills a process that does not answer in time, and the process
is always ended.

Starting Meteor costs a JVM and its paraphrase table (5-6 s of a quiet core, 18-23 s of a busy
one, and 1.1 GB), so :func:`meteor_score` keeps one process per program (per java, jar, heap and
timeout; a forked child starts its own) and ends it after ``IDLE_CLOSE`` seconds without a call
and at exit: ``catcap demo --compare`` or an ablation scoring several models starts Meteor once.
"""

from __future__ import annotations

import atexit
import collections
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Hashable, Iterable, Mapping, Sequence, TypeVar

from catcap.metrics.errors import MetricUnavailable
from catcap.metrics.java import (ENV_METEOR_JAR, INSTALL_JARS, JavaProcessError, check_inputs, find_jar,
                                 find_java, java_major_version, tail)

K = TypeVar("K", bound=Hashable)

METRIC = "METEOR"
METEOR_JAR = "meteor/meteor-1.5.jar"
PARAPHRASE_TABLE = "data/paraphrase-en.gz"  # looked up by Meteor next to its jar
METEOR_ARGS = ("-", "-", "-stdio", "-l", "en", "-norm")
DEFAULT_TIMEOUT = 600.0
IDLE_CLOSE = 60.0  # seconds the shared Meteor of meteor_score stays up without a call


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def clean_hypothesis(text: str) -> str:
    """pycocoevalcap's cleaning of a hypothesis (line breaks first become spaces)."""
    return _one_line(text).replace("|||", "").replace("  ", " ")


def clean_reference(text: str) -> str:
    """A reference made safe for the protocol: no line breaks, no ``'|||'``."""
    return _one_line(text).replace("|||", "")


def score_line(references: Sequence[str], hypothesis: str) -> str:
    """The SCORE request for one image, built like pycocoevalcap's."""
    refs = " ||| ".join(clean_reference(r) for r in references)
    return " ||| ".join(("SCORE", refs, clean_hypothesis(hypothesis)))


def find_meteor_jar() -> Path:
    """meteor-1.5.jar (``$CATCAP_METEOR_JAR`` or pycocoevalcap's), with its paraphrase table."""
    jar = find_jar(METRIC, ENV_METEOR_JAR, METEOR_JAR)
    if not (jar.parent / PARAPHRASE_TABLE).is_file():
        raise MetricUnavailable(METRIC, f"{jar.parent / PARAPHRASE_TABLE} is missing (Meteor reads it next to "
                                        f"{jar.name}); reinstall pycocoevalcap ({INSTALL_JARS})")
    return jar


class _MeteorProcess:
    """One running Meteor, spoken to line by line; stderr is drained into a ring buffer."""

    def __init__(self, cmd: list[str], cwd: Path, timeout: float | None):
        self.timeout = timeout
        self.timed_out = False
        try:
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
        except OSError as err:
            raise MetricUnavailable(METRIC, f"could not start {cmd[0]}: {err}") from err
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._stderr_reader = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_reader.start()

    def _drain_stderr(self) -> None:
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode("utf-8", "replace").rstrip())

    def exchange(self, lines: Iterable[str], answers: int, deadline: float | None) -> list[str]:
        """Write ``lines`` from a writer thread and read ``answers`` lines meanwhile; kill
        the process if the answers are not all there by ``deadline`` (time.monotonic())."""
        payload = "".join(f"{line}\n" for line in lines).encode("utf-8")
        writer = threading.Thread(target=self._write, args=(payload,), daemon=True)
        watchdog = None
        if deadline is not None:
            watchdog = threading.Timer(max(deadline - time.monotonic(), 0.0), self._expire)
        writer.start()
        if watchdog:
            watchdog.start()
        try:
            return [self._readline() for _ in range(answers)]
        finally:
            if watchdog:
                watchdog.cancel()
            writer.join(timeout=5)

    def _write(self, payload: bytes) -> None:
        try:
            self.proc.stdin.write(payload)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the process died: the reader sees end of output and reports it

    def _expire(self) -> None:
        self.timed_out = True
        self.proc.kill()

    def _readline(self) -> str:
        raw = self.proc.stdout.readline()
        if not raw:
            raise self.failure()
        return raw.decode("utf-8", "replace").strip()

    def failure(self, unexpected: str | None = None) -> JavaProcessError:
        """The error to raise when Meteor stopped answering, or answered ``unexpected``
        where numbers were due (a JVM that fails to start prints its error on stdout)."""
        if self.timed_out:
            return JavaProcessError(METRIC, f"Meteor gave no answer within {self.timeout:g} s and was killed; "
                                            "pass a larger timeout= for this many images")
        try:
            code = self.proc.wait(timeout=10 if unexpected is None else 2)
        except subprocess.TimeoutExpired:
            code = None
        output = [] if unexpected is None else [unexpected]
        if code is not None:
            output += self.proc.stdout.read().decode("utf-8", "replace").splitlines()
            self._stderr_reader.join(timeout=5)
        output += self.stderr
        what = f"Meteor answered {unexpected[:200]!r} where numbers were due" if unexpected is not None else \
            "Meteor closed its output"
        what += f"; its Java process exited with code {code}" if code is not None else ""
        return JavaProcessError(METRIC, f"{what}. Its output:\n{tail(chr(10).join(output))}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Close stdin (Meteor exits on end of input), kill it if it lingers, reap it."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr_reader.join(timeout=5)
        self.proc.stdout.close()
        self.proc.stderr.close()


def _numbers(line: str, process: _MeteorProcess, count: int | None = None) -> list[float]:
    """The numbers on one answer line (``count`` of them if given), else a clear error."""
    try:
        values = [float(x) for x in line.split()]
    except ValueError:
        values = []
    if not values or (count is not None and len(values) != count):
        raise process.failure(unexpected=line)
    return values


class MeteorScorer:
    """A Meteor process kept running between calls (starting one takes several seconds,
    mostly loading the paraphrase table). Use as a context manager or call :meth:`close`.

    java_heap: the JVM's -Xmx (pycocoevalcap uses 2G). timeout: seconds one :meth:`score`
    call may take, JVM start included, before the process is killed (None: no limit).
    idle_close: end the process after this many seconds without a call (None: keep it until
    :meth:`close`); the next call starts a new one.
    """

    def __init__(self, *, java_heap: str = "2G", timeout: float | None = DEFAULT_TIMEOUT,
                 idle_close: float | None = None, java: str | None = None):
        java = java or find_java(METRIC)
        java_major_version(java, METRIC)
        self.jar = find_meteor_jar()
        self.command = [java, f"-Xmx{java_heap}", "-jar", str(self.jar), *METEOR_ARGS]
        self.timeout = timeout
        self.idle_close = idle_close
        self._process: _MeteorProcess | None = None
        self._idle: threading.Timer | None = None
        self._lock = threading.Lock()

    def score(self, gts: Mapping[K, Sequence[str]], res: Mapping[K, str]) -> tuple[float, dict[K, float]]:
        """Corpus METEOR (Meteor's aggregate) and the per-image scores, keyed like ``gts``."""
        keys = check_inputs(METRIC, gts, res)
        requests = [score_line(gts[k], res[k]) for k in keys]
        with self._lock:
            self._stop_idle_timer()
            if self._process is None or not self._process.alive():
                self._process = _MeteorProcess(self.command, self.jar.parent, self.timeout)
            process = self._process
            deadline = time.monotonic() + self.timeout if self.timeout else None
            try:
                stats = process.exchange(requests, len(keys), deadline)
                for line in stats:
                    _numbers(line, process)
                answers = process.exchange(["EVAL ||| " + " ||| ".join(stats)], len(keys) + 1, deadline)
                scores = [_numbers(line, process, count=1)[0] for line in answers]
            except BaseException:
                self._process = None
                process.close()
                raise
            if self.idle_close is not None:
                self._idle = threading.Timer(self.idle_close, self.close)
                self._idle.daemon = True
                self._idle.start()
        return scores[-1], dict(zip(keys, scores[:-1]))

    def _stop_idle_timer(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def running(self) -> bool:
        """Whether a Meteor process is up (it starts with the first :meth:`score`)."""
        return self._process is not None and self._process.alive()

    def close(self) -> None:
        """End the Meteor process (a later :meth:`score` starts a new one)."""
        with self._lock:
            self._stop_idle_timer()
            if self._process is not None:
                self._process.close()
                self._process = None

    def __enter__(self) -> "MeteorScorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None:
            process.close()


def meteor_score(gts: Mapping[K, Sequence[str]], res: Mapping[K, str], *, java_heap: str = "2G",
                 timeout: float | None = DEFAULT_TIMEOUT) -> tuple[float, dict[K, float]]:
    """METEOR 1.5 of tokenized, space-joined captions, equal to pycocoevalcap's.

    gts: references per image; res: one hypothesis per image (same keys). Returns Meteor's
    corpus score and the per-image scores. Raises MetricUnavailable without Java or the jar,
    MetricInputError for malformed inputs.
    """
    check_inputs(METRIC, gts, res)  # before paying for a JVM start
    return shared_scorer(java_heap, timeout).score(gts, res)


_SHARED: dict[tuple, MeteorScorer] = {}
_SHARED_LOCK = threading.Lock()


def shared_scorer(java_heap: str = "2G", timeout: float | None = DEFAULT_TIMEOUT) -> MeteorScorer:
    """This process's Meteor for the java and jar found now (module doc): started by its first
    call, ended ``IDLE_CLOSE`` seconds after its last and at exit."""
    java, jar = find_java(METRIC), find_meteor_jar()
    key = (os.getpid(), java, jar, java_heap, timeout)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = MeteorScorer(java_heap=java_heap, timeout=timeout, idle_close=IDLE_CLOSE, java=java)
        return _SHARED[key]


@atexit.register
def close_shared() -> None:
    """End this process's shared Meteor processes (those a forked parent started are its own)."""
    with _SHARED_LOCK:
        mine = [k for k in _SHARED if k[0] == os.getpid()]
        scorers = [_SHARED.pop(k) for k in mine]
    for scorer in scorers:
        scorer.close()
