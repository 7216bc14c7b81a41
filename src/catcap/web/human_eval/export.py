"""``catcap human-eval export``: winners, totals, agreement and significance of a study.

Rules (also in ``docs/faces.md``):

- **Winner of an image on a criterion**: the system that more than half of the study's R raters
  prefer, i.e. at least floor(R/2) + 1 of them (3 of 5, the paper's "more than 2 of 5"). The
  denominator is every rater of the study: a skipped or missing rating counts as not
  preferring either system. Otherwise the image is a tie for that criterion.
- **Totals** per criterion: images won by A, won by B, ties.
- **Agreement**: Fleiss' kappa per criterion over the categories A / B / no preference, one
  rating per rater and image; skipped and missing ratings are left out
  (:func:`catcap.web.human_eval.stats.fleiss_kappa`).
- **Sign test** per criterion: two-sided exact binomial test of A's wins against B's wins,
  ties dropped (:func:`catcap.web.human_eval.stats.sign_test`).

Outputs in ``--out``: ``winners.csv`` (one row per image and criterion), ``votes.csv`` (every
stored answer, with the system it means), ``summary.json`` and ``summary.html``; each written
atomically.
"""

from __future__ import annotations

import csv
import html
import io
from pathlib import Path

from catcap.atomic import write_json_atomic, write_text_atomic
from catcap.web.human_eval.stats import fleiss_kappa, sign_test
from catcap.web.human_eval.study import Study, load_study

CATEGORIES = ("A", "B", "none")
EXPORTED = ("winners.csv", "votes.csv", "summary.json", "summary.html")  # the files written into --out


def tally(study: Study) -> dict[str, list[dict]]:
    """{criterion: one dict per item with the counts of A, B, none, skip and missing}."""
    answers: dict[tuple[int, str], list[str]] = {}
    for vote in study.store().votes():
        if vote.rater in study.raters:
            answers.setdefault((vote.item, vote.criterion), []).append(vote.choice)
    raters = len(study.raters)
    out = {}
    for crit in study.criteria:
        rows = []
        for item in study.items:
            got = answers.get((item["item"], crit), [])
            counts = {c: got.count(c) for c in (*CATEGORIES, "skip")}
            rows.append({"item": item["item"], "image_id": item["image_id"], **counts,
                         "missing": raters - len(got), "winner": winner(counts["A"], counts["B"], raters)})
        out[crit] = rows
    return out


def winner(votes_a: int, votes_b: int, raters: int) -> str:
    """'A' or 'B' when more than half of all ``raters`` prefer it (2 * votes > raters), else 'tie'."""
    if 2 * votes_a > raters:
        return "A"
    if 2 * votes_b > raters:
        return "B"
    return "tie"


def summarize(study: Study, tallies: dict[str, list[dict]]) -> dict:
    """The summary: per criterion the totals, Fleiss' kappa and the sign test; per rater progress."""
    raters = len(study.raters)
    criteria = {}
    for crit, rows in tallies.items():
        wins = {w: sum(r["winner"] == w for r in rows) for w in ("A", "B", "tie")}
        rated = [[r[c] for c in CATEGORIES] for r in rows]
        criteria[crit] = {
            "wins_A": wins["A"], "wins_B": wins["B"], "ties": wins["tie"],
            "fleiss_kappa": fleiss_kappa(rated),
            "kappa_images": sum(sum(r) >= 2 for r in rated),
            "votes": {c: sum(r[c] for r in rows) for c in (*CATEGORIES, "skip", "missing")},
            "sign_test_p": sign_test(wins["A"], wins["B"]),
        }
    progress = {}
    store = study.store()
    for rid in study.raters:
        progress[rid] = sum(1 for a in store.answers(rid).values() if set(study.criteria) <= set(a))
    return {
        "systems": study.names, "images": len(study.items), "raters": raters,
        "majority": raters // 2 + 1,
        "rule": (f"a system wins an image on a criterion when more than half of the {raters} raters "
                 f"(at least {raters // 2 + 1}) prefer its caption; skipped or missing ratings prefer "
                 "neither; otherwise the image is a tie. Sign test: two-sided exact binomial on A's wins "
                 "against B's wins, ties dropped. Fleiss' kappa over A / B / no preference, skips left out."),
        "criteria": criteria, "rated_per_rater": progress,
    }


def _csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def winners_csv(study: Study, tallies: dict[str, list[dict]]) -> str:
    names = study.names
    rows = [[r["item"], r["image_id"], crit, r["A"], r["B"], r["none"], r["skip"], r["missing"], r["winner"],
             names.get(r["winner"], "tie")] for crit, rs in tallies.items() for r in rs]
    return _csv(["item", "image_id", "criterion", f"votes_A ({names['A']})", f"votes_B ({names['B']})",
                 "no_preference", "skipped", "missing", "winner", "winner_name"], rows)


def votes_csv(study: Study) -> str:
    names, items = study.names, study.items
    rows = [[v.rater, v.item, items[v.item]["image_id"], v.criterion, v.choice, names.get(v.choice, v.choice),
             v.shown_left, v.at] for v in study.store().votes() if 0 <= v.item < len(items)]
    return _csv(["rater", "item", "image_id", "criterion", "choice", "system_name", "shown_left", "at"], rows)


def summary_html(summary: dict) -> str:
    """A small standalone HTML page of the summary."""
    e = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    na, nb = e(summary["systems"]["A"]), e(summary["systems"]["B"])
    rows = []
    for crit, c in summary["criteria"].items():
        kappa = "undefined" if c["fleiss_kappa"] is None else f"{c['fleiss_kappa']:.3f}"
        rows.append(f"<tr><td>{e(crit)}</td><td>{c['wins_A']}</td><td>{c['wins_B']}</td><td>{c['ties']}</td>"
                    f"<td>{kappa}</td><td>{c['sign_test_p']:.4g}</td></tr>")
    raters = "".join(f"<li>{e(r)}: {n} / {summary['images']}</li>" for r, n in summary["rated_per_rater"].items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>human evaluation: {na} vs {nb}</title>
<style>body {{ font: 15px/1.5 system-ui, sans-serif; margin: 2em; color: #1d2329; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: .3em .8em; border-bottom: 1px solid #dde2e7; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }} .note {{ color: #5b6670; max-width: 50em; }}</style></head>
<body><h1>Human evaluation: {na} vs {nb}</h1>
<p>{summary['images']} images, {summary['raters']} raters.</p>
<table><tr><th>criterion</th><th>{na} wins</th><th>{nb} wins</th><th>ties</th><th>Fleiss' &kappa;</th>
<th>sign test p</th></tr>{''.join(rows)}</table>
<p class="note">{e(summary['rule'])}</p>
<h2>Images rated per rater</h2><ul>{raters}</ul></body></html>
"""


def unknown_votes(study: Study) -> list[str]:
    """The stored vote rows the study does not know (a rater, an item, a criterion or a choice
    that is not its own: a votes.sqlite edited, or copied from another study), one line each."""
    raters, criteria, n = study.raters, set(study.criteria), len(study.items)
    bad = []
    for v in study.store().votes():
        why = ("rater" if v.rater not in raters else "item" if not 0 <= v.item < n else
               "criterion" if v.criterion not in criteria else "choice" if v.choice not in (*CATEGORIES, "skip") else "")
        if why:
            bad.append(f"rater {v.rater!r} item {v.item} criterion {v.criterion!r} choice {v.choice!r} (unknown {why})")
    return bad


def export_study(folder: str | Path, out: str | Path) -> dict:
    """Write winners.csv, votes.csv, summary.json and summary.html of a study into ``out``. A
    summary is a derived output: from votes the study does not know, nothing is written (the
    files of an earlier export stay as they were) and the error lists the rows."""
    import sqlite3

    study = load_study(folder)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file; expected a folder for the exported files")
    try:
        bad = unknown_votes(study)
    except sqlite3.Error as err:
        raise ValueError(f"{study.store().path}: not a readable vote database ({err}); expected the SQLite file "
                         "catcap human-eval create made: restore it from a copy") from None
    if bad:
        shown = "; ".join(bad[:3]) + (f" ... ({len(bad)} in all)" if len(bad) > 3 else "")
        raise ValueError(f"{study.store().path} holds {len(bad)} vote row(s) this study does not know: {shown}; "
                         f"expected votes of the raters {sorted(study.raters)} on items 0..{len(study.items) - 1}; "
                         f"nothing was exported (an earlier export in {out} is kept): remove those rows or export "
                         "the study they belong to")
    tallies = tally(study)
    summary = summarize(study, tallies)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "winners.csv", winners_csv(study, tallies))
    write_text_atomic(out / "votes.csv", votes_csv(study))
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "summary.html", summary_html(summary))
    return summary
