"""The bad-input catalogue (issue 40; docs/reliability.md): runs `catcap` on every malformed input of
bad_input_cases.py, bad_input_cases_more.py and bad_input_cases_options.py (images, feature stores, checkpoints, configs,
reference and result files, importers, numbers, permissions, interrupted runs, derived outputs,
output paths) and judges each outcome from what the command did:

* a traceback anywhere in its output fails the case;
* its exit status must be the expected one (2 refused, 1 some inputs failed, 0 accepted); an
  exit 0 where 1 or 2 was expected is counted apart ("exit 0 on bad input");
* every file that existed before the run (the case's own inputs, an earlier output, and every
  shared input: world, checkpoints, photos, study) must be byte-identical afterwards, unless the
  case lets the run continue it; a refused run (2) must create no file (but the list of failures
  the case names, e.g. ``catcap extract``'s OUT.errors.txt);
* a refusal's message is one line ``catcap <command>: error: ...`` and names what the case says
  (the file, the entry, the key, the option); a partial run (1) lists its failures likewise.

    python benchmarks/bad_inputs.py                        # every case, subprocesses; writes the table
    python benchmarks/bad_inputs.py --only configs,images  # some classes
    python benchmarks/bad_inputs.py --fast                 # the normal test suite's subset

The table goes to benchmarks/results/bad_inputs.md (--out). Permission cases run, when this is
root, under ``setpriv`` without the capabilities that let root ignore file modes (as any other
user runs); disk-full cases under a file-size limit (RLIMIT_FSIZE), as
tests/reliability/test_disk_errors.py does.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bad_input_cases import CASES as FIRST, Case  # noqa: E402
from bad_input_cases_more import MORE_CASES  # noqa: E402
from bad_input_cases_options import OPTION_CASES  # noqa: E402
from bad_input_context import Context  # noqa: E402

CASES: list[Case] = FIRST + MORE_CASES + OPTION_CASES
UNPRIVILEGED = "-dac_override,-dac_read_search,-fowner"  # setpriv: root without its file-mode overrides


@dataclass
class Outcome:
    case: Case
    code: int | None
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    skipped: str = ""
    message: str = ""  # the last line of its output

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.problems:
            return "FAIL"
        return {0: "accepted", 1: "partial, listed", 2: "clear error"}[self.case.expect]


def snapshot(*roots: Path) -> dict[Path, str]:
    """sha256 of every file under ``roots`` (symlinks as their target text)."""
    found = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_symlink():
                found[path] = "link:" + os.readlink(path)
            elif path.is_file():
                try:
                    found[path] = hashlib.sha256(path.read_bytes()).hexdigest()
                except PermissionError:
                    found[path] = "unreadable"
    return found


def _limit(size: int):
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


CATCAP_SRC: str | None = None  # --catcap-src: run another checkout's catcap (e.g. main, to compare)


def execute(argv: list[str], folder: Path, case: Case, inprocess: bool) -> tuple[int | None, str]:
    """Run ``catcap argv`` in ``folder``: (exit status, stdout and stderr)."""
    if inprocess:
        import contextlib
        import io
        import traceback

        from catcap.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        before = os.getcwd()
        try:
            os.chdir(folder)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
        except Exception:  # noqa: BLE001 (a traceback is what the catalogue looks for)
            code, _ = None, err.write(traceback.format_exc())
        finally:
            os.chdir(before)
        return code, out.getvalue() + err.getvalue()
    env = dict(os.environ, OMP_NUM_THREADS="1", HOME=str(folder), CATCAP_CACHE_DIR=str(folder / ".cache"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("CATCAP_FAULT", None)
    if CATCAP_SRC:
        env["PYTHONPATH"] = CATCAP_SRC
    pre = _limit(case.fsize) if case.fsize else None
    line = [sys.executable, "-m", "catcap", *argv]
    if case.unprivileged and os.geteuid() == 0:  # file modes apply to root too
        line = [shutil.which("setpriv") or "setpriv", "--bounding-set", UNPRIVILEGED, "--", *line]
    try:
        done = subprocess.run(line, cwd=folder, env=env, capture_output=True, text=True, timeout=900, preexec_fn=pre)
    except subprocess.TimeoutExpired:
        return None, "timed out after 900 s"
    return done.returncode, done.stdout + done.stderr


def run_case(case: Case, ctx: Context, inprocess: bool = False) -> Outcome:
    if case.unprivileged and os.geteuid() == 0 and (inprocess or not shutil.which("setpriv")):
        return Outcome(case, None, skipped="root ignores file modes: needs a subprocess under setpriv")
    folder = ctx.root / "cases" / case.id.replace(" ", "_").replace("/", "_")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        argv = [str(a) for a in case.make(ctx, folder)]
    except Exception as err:  # noqa: BLE001
        return Outcome(case, None, [f"the case could not be made: {type(err).__name__}: {err}"])
    shared = snapshot(ctx.shared)
    own = snapshot(folder)
    start = time.perf_counter()
    code, output = execute(argv, folder, case, inprocess)
    outcome = Outcome(case, code, seconds=time.perf_counter() - start, message=_last(output))
    judge(outcome, output, shared, own, ctx, folder)
    return outcome


def judge(outcome: Outcome, output: str, shared: dict, own: dict, ctx: Context, folder: Path) -> None:
    case, problems = outcome.case, outcome.problems
    if "Traceback (most recent call last)" in output:
        problems.append("traceback: " + output.strip().splitlines()[-1][:160])
    if outcome.code != case.expect:
        tag = "exit 0 on bad input" if outcome.code == 0 else f"exit {outcome.code}"
        problems.append(f"{tag}, expected {case.expect}: {_last(output)}")
    if snapshot(ctx.shared) != shared:
        problems.append("a shared input was changed: " + ", ".join(
            str(p.relative_to(ctx.shared)) for p, h in snapshot(ctx.shared).items() if shared.get(p) != h)[:200])
    after = snapshot(folder)
    changed = [p for p, h in own.items() if after.get(p) != h and not _may(case, folder, p)]
    if changed:
        problems.append("damaged: " + ", ".join(str(p.relative_to(folder)) for p in changed)[:200])
    if case.expect == 2:
        new = [p for p in after if p not in own and ".cache" not in p.parts and not _may(case, folder, p)]
        if new:
            problems.append("wrote on a refused input: " + ", ".join(str(p.relative_to(folder)) for p in new)[:200])
    if case.expect in (1, 2) and outcome.code == case.expect:
        missing = [w for w in case.words if w not in output]
        if missing:
            problems.append(f"the message does not name {missing}: {_last(output)}")
        if case.expect == 2:
            errors = [line for line in output.splitlines() if ": error: " in line]
            if len(errors) != 1 or not errors[0].startswith("catcap "):
                problems.append(f"expected one 'catcap <command>: error: ...' line, found {len(errors)}")


def _may(case: Case, folder: Path, path: Path) -> bool:
    rel = str(path.relative_to(folder))
    return any(rel == m or (m.endswith("/") and rel.startswith(m)) for m in case.may_change)


def _last(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def _cell(text: str) -> str:
    """A message in a Markdown table cell: this machine's temporary folder cut, pipes escaped."""
    return text.replace(str(Path(tempfile.gettempdir())) + "/", "").replace("|", "\\|")[:180]


def table(outcomes: list[Outcome], seconds: float, command: str) -> str:
    by_class: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_class[o.case.cls].append(o)
    rows = ["| class | cases | clear error (2) | partial, listed (1) | accepted (0) | fail | traceback | "
            "exit 0 on bad input | damaged | skipped |", "|---|---|---|---|---|---|---|---|---|---|"]
    total = Counter()
    for cls, group in by_class.items():
        v = Counter(o.verdict for o in group)
        t = sum(any(p.startswith("traceback") for p in o.problems) for o in group)
        z = sum(any(p.startswith("exit 0 on bad input") for p in o.problems) for o in group)
        dmg = sum(any(p.startswith(("damaged", "a shared input", "wrote on")) for p in o.problems) for o in group)
        row = Counter(cases=len(group), clear=v["clear error"], partial=v["partial, listed"], accepted=v["accepted"],
                      fail=v["FAIL"], traceback=t, zero=z, damaged=dmg, skipped=v["skipped"])
        total.update(row)
        rows.append(f"| {cls} | " + " | ".join(str(row[k]) for k in ("cases", "clear", "partial", "accepted", "fail",
                                                                     "traceback", "zero", "damaged", "skipped")) + " |")
    rows.append("| **all** | " + " | ".join(f"**{total[k]}**" for k in ("cases", "clear", "partial", "accepted", "fail",
                                                                         "traceback", "zero", "damaged", "skipped"))
                + " |")
    judged = total["cases"] - total["skipped"]
    good = judged - total["fail"]
    lines = [f"# The bad-input catalogue: {total['cases']} cases", "",
             f"`{command}` ({seconds / 60:.1f} min; benchmarks/bad_inputs.py judges each outcome: traceback, exit "
             "status, inputs and earlier outputs byte-identical, a one-line message naming the file, entry, key or "
             "option).", "",
             f"**{good} of {judged} ({100 * good / max(judged, 1):.1f}%)** give a clear error or are correctly accepted "
             f"(or, exit 1, do what they can and list the rest); {total['traceback']} tracebacks, {total['zero']} exit 0 "
             f"on bad input, {total['damaged']} with an input or earlier output damaged.", "", *rows, ""]
    failed = [o for o in outcomes if o.problems]
    if failed:
        lines += ["## Cases that fail", ""] + [f"- `{o.case.id}` ({o.case.cls}): {'; '.join(o.problems)}"
                                              for o in failed] + [""]
    skipped = [o for o in outcomes if o.skipped]
    if skipped:
        lines += ["## Skipped", ""] + [f"- `{o.case.id}`: {o.skipped}" for o in skipped] + [""]
    lines += ["## Every case", "", "| case | class | expected | exit | verdict | s | last line of the output |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| `{o.case.id}` | {o.case.cls} | {o.case.expect} | {o.code} | {o.verdict} | {o.seconds:.1f} | "
              f"{_cell(o.message)} |" for o in outcomes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated classes (default: all)")
    parser.add_argument("--ids", help="comma-separated case ids")
    parser.add_argument("--fast", action="store_true", help="the normal test suite's subset only")
    parser.add_argument("--inprocess", action="store_true", help="call catcap's main() instead of subprocesses")
    parser.add_argument("--work", help="folder for the shared inputs and the cases (default: a new temporary one)")
    parser.add_argument("--out", default=str(HERE / "results" / "bad_inputs.md"), help="the Markdown table")
    parser.add_argument("--catcap-src", help="run the catcap of this src folder (e.g. another checkout's, to "
                        "compare); the shared inputs are still made by this one")
    args = parser.parse_args(argv)
    global CATCAP_SRC
    CATCAP_SRC = args.catcap_src
    chosen = [c for c in CASES if (not args.only or c.cls in args.only.split(","))
              and (not args.ids or c.id in args.ids.split(",")) and (not args.fast or c.fast)]
    work = Path(args.work or tempfile.mkdtemp(prefix="catcap-bad-inputs-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)  # the permission cases run as another user
    ctx = Context(work)
    start = time.perf_counter()
    outcomes = []
    for i, case in enumerate(chosen, 1):
        outcome = run_case(case, ctx, inprocess=args.inprocess)
        outcomes.append(outcome)
        print(f"[{i}/{len(chosen)}] {outcome.verdict:16} {case.cls:18} {case.id}"
              + (f"  <- {'; '.join(outcome.problems)}" if outcome.problems else ""), flush=True)
    command = "python benchmarks/bad_inputs.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = table(outcomes, time.perf_counter() - start, command)
    Path(args.out).write_text(text)
    print(text.split("## Every case")[0])
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
