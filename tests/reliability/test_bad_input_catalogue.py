"""The bad-input catalogue of issue 40 (benchmarks/bad_inputs.py, its recorded run in
benchmarks/results/bad_inputs.md) as tests: its fast subset runs in the normal suite, calling
catcap's main() in this process; every case, in subprocesses as the script runs them, with
`make test-slow` (CATCAP_ALL_FAULTS=1). Each outcome is judged by the script's own judge: no
traceback, the expected exit status, inputs and earlier outputs byte-identical, a one-line
message naming the file, entry, key or option."""

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bad_input_context import Context  # noqa: E402
from bad_inputs import CASES, run_case  # noqa: E402

CLASSES = {"images", "feature stores", "checkpoints", "configs", "references", "results", "importers", "numbers",
           "permissions", "interrupted runs", "derived outputs", "output paths"}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return Context(tmp_path_factory.mktemp("catalogue"))


def test_the_catalogue_covers_every_class():
    counts = Counter(c.cls for c in CASES)
    assert set(counts) == CLASSES and min(counts.values()) >= 5, counts
    assert len(CASES) >= 120 and len({c.id for c in CASES}) == len(CASES)
    fast = Counter(c.cls for c in CASES if c.fast)
    assert len(fast) >= 9, fast  # the normal suite's subset spans the classes


def test_the_judge_fails_a_command_that_writes_over_its_input(ctx, monkeypatch):
    """The judge is not a rubber stamp: with the path check switched off, `evaluate --output
    sub/../r.json --results r.json` writes its scores over the results and the case fails twice,
    as an exit 0 on bad input and as a damaged input."""
    from catcap.cli import paths

    case = next(c for c in CASES if c.id == "same-file-by-dotdot")
    monkeypatch.setattr(paths, "check", lambda named, args: None)
    outcome = run_case(case, ctx, inprocess=True)
    assert any(p.startswith("exit 0 on bad input") for p in outcome.problems), outcome.problems
    assert any(p.startswith("damaged: r.json") for p in outcome.problems), outcome.problems


@pytest.mark.parametrize("case", [c for c in CASES if c.fast], ids=lambda c: c.id)
def test_a_fast_case(case, ctx):
    outcome = run_case(case, ctx, inprocess=True)
    assert not outcome.problems, outcome.problems


@pytest.mark.all_faults
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_case(case, ctx):
    outcome = run_case(case, ctx)
    assert outcome.skipped or not outcome.problems, outcome.problems
