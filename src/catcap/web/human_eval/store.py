"""The votes of a human-evaluation study: one SQLite file in WAL mode.

One row per (rater, item, criterion): the choice (``A``, ``B``, ``none`` = no preference,
``skip`` = the rater skipped the image), which system was shown on the left, and when. A rater's
answer for one image (all criteria) is written in one transaction, so a reader (``export``, a
second server worker) sees all of it or none of it; answering the same image again replaces the
earlier rows. WAL mode lets readers run while a rater submits; ``busy_timeout`` makes concurrent
writers wait for each other instead of failing.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from catcap import faults

CHOICES = ("A", "B", "none", "skip")
SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    rater TEXT NOT NULL,
    item INTEGER NOT NULL,
    criterion TEXT NOT NULL,
    choice TEXT NOT NULL CHECK (choice IN ('A', 'B', 'none', 'skip')),
    shown_left TEXT NOT NULL CHECK (shown_left IN ('A', 'B')),
    at TEXT NOT NULL,
    PRIMARY KEY (rater, item, criterion)
);
"""


@dataclass(frozen=True)
class Vote:
    """One stored answer."""

    rater: str
    item: int
    criterion: str
    choice: str
    shown_left: str
    at: str


class VoteStore:
    """The study's ``votes.sqlite``; every method opens its own short-lived connection, so one
    store may be used from any thread or process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)  # explicit BEGIN/COMMIT below
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA synchronous = FULL")  # a committed vote survives a power cut
        return conn

    def create(self) -> None:
        """Make the database: WAL journal (a persistent setting of the file) and the table."""
        with closing(self._connect()) as conn:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise RuntimeError(f"SQLite refused WAL mode for {self.path} (got {mode}); "
                                   "put the study on a local file system")
            conn.execute(SCHEMA)

    def journal_mode(self) -> str:
        with closing(self._connect()) as conn:
            return conn.execute("PRAGMA journal_mode").fetchone()[0]

    def record(self, rater: str, item: int, choices: Mapping[str, str], shown_left: str) -> None:
        """Store one rater's answer for one item, every criterion in one transaction, replacing
        an earlier answer. ``choices``: {criterion: 'A' | 'B' | 'none' | 'skip'}."""
        bad = {c: v for c, v in choices.items() if v not in CHOICES}
        if bad or shown_left not in ("A", "B"):
            raise ValueError(f"choices must be one of {CHOICES} and shown_left 'A' or 'B'; got {bad or shown_left!r}")
        at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        rows = [(rater, int(item), crit, choice, shown_left, at) for crit, choice in choices.items()]
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO votes (rater, item, criterion, choice, shown_left, at) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (rater, item, criterion) DO UPDATE SET choice = excluded.choice, "
                    "shown_left = excluded.shown_left, at = excluded.at", rows)
                faults.point("human_eval.before_commit")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        faults.point("human_eval.after_commit")

    def answers(self, rater: str) -> dict[int, dict[str, str]]:
        """{item: {criterion: choice}} of one rater."""
        with closing(self._connect()) as conn:
            rows = conn.execute("SELECT item, criterion, choice FROM votes WHERE rater = ?", (rater,)).fetchall()
        out: dict[int, dict[str, str]] = {}
        for item, crit, choice in rows:
            out.setdefault(int(item), {})[crit] = choice
        return out

    def votes(self) -> list[Vote]:
        """Every stored answer, ordered by rater, item, criterion."""
        with closing(self._connect()) as conn:
            rows = conn.execute("SELECT rater, item, criterion, choice, shown_left, at FROM votes "
                                "ORDER BY rater, item, criterion").fetchall()
        return [Vote(r, int(i), c, ch, s, at) for r, i, c, ch, s, at in rows]
