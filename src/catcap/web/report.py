"""``catcap report``: a self-contained HTML page comparing two systems image by image.

Works from result files only (no model, no torch): both result files are scored against the
references with :func:`catcap.metrics.evaluate.evaluate_captions`, compared with the paired
bootstrap of ``catcap compare`` (:func:`catcap.metrics.bootstrap.paired_bootstrap`, same inputs
and seed give the same numbers), and written as one HTML file with inline CSS and JavaScript:
the bootstrap summary on top, then one row per image with the image, both captions, the
references and the per-image scores of both systems and their difference B - A. Buttons sort
the rows by the largest difference of a metric; a text box and a "who is better" selector
filter them. Every caption and reference is HTML-escaped.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from catcap.atomic import write_text_atomic
from catcap.metrics.bootstrap import Comparison, paired_bootstrap
from catcap.metrics.errors import MetricInputError
from catcap.metrics.evaluate import NAMES, evaluate_captions, parse_metrics
from catcap.metrics.files import load_references, load_result_pair
from catcap.web.images import data_uri, find_images, jpeg_thumbnail
from catcap.web.report_assets import REPORT_CSS, REPORT_JS

DEFAULT_METRICS = "bleu,rouge,cider"  # Java-free; --metrics adds meteor / spice


@dataclass
class ReportData:
    """Everything the page shows: names, images, captions, scores and the bootstrap rows."""

    names: tuple[str, str]
    sources: tuple[str, str, str]
    image_ids: list
    captions_a: list[str]
    captions_b: list[str]
    references: list[list[str]]
    metrics: list[str]
    per_image_a: dict[str, np.ndarray]
    per_image_b: dict[str, np.ndarray]
    comparison: list[Comparison]
    unavailable: dict[str, str] = field(default_factory=dict)
    images: dict[Any, str] = field(default_factory=dict)  # image id -> src (data URI or link)
    resamples: int = 1000
    seed: int = 0

    def diffs(self, metric: str) -> np.ndarray:
        """Per-image B - A of one metric, in row order."""
        return self.per_image_b[metric] - self.per_image_a[metric]


def check_names(names: str | Sequence[str] | None) -> tuple[str, str]:
    """'A,B' or two strings -> two distinct, non-empty display names (default A and B)."""
    if names is None:
        return ("A", "B")
    parts = [n.strip() for n in (names.split(",") if isinstance(names, str) else names)]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"--names expects two different names separated by a comma (e.g. --names baseline,cat); "
                         f"got {names!r}")
    return parts[0], parts[1]


def load_pair(a: str | Path, b: str | Path, refs: str | Path, split: str | None):
    """(references, results A, results B aligned to A's order); both systems must caption the
    same images, all of which the references contain."""
    references = load_references(refs, split)
    res_a, res_b = load_result_pair(a, b, "a side-by-side report", refs)
    missing = [k for k in res_a if k not in references]
    if missing:
        raise MetricInputError(f"{len(missing)} captioned image(s) are not in the references {refs} "
                               f"(e.g. {missing[:3]}); use the references (and --split) the results were made for")
    return references, res_a, res_b


def image_sources(ids: list, refs: str | Path, images_dir: str | Path, *, link: bool, out: str | Path | None,
                  thumb: int) -> dict[Any, str]:
    """{image id: img src}: base64 JPEG thumbnails (at most ``thumb`` px a side), or with
    ``link`` paths relative to the report's folder (the page then needs the image folder)."""
    files = find_images(ids, refs, images_dir)
    if link:
        base = Path(out).resolve().parent if out else Path.cwd()
        return {k: Path(os.path.relpath(p.resolve(), base)).as_posix() for k, p in files.items()}
    return {k: data_uri(jpeg_thumbnail(p, thumb)) for k, p in files.items()}


def compute_report(a: str | Path, b: str | Path, refs: str | Path, *, split: str | None = None,
                   images: str | Path | None = None, names: str | Sequence[str] | None = None,
                   metrics: str | Sequence[str] | None = DEFAULT_METRICS, link_images: bool = False,
                   out: str | Path | None = None, resamples: int = 1000, seed: int = 0, thumb: int = 192,
                   corenlp_dir: str | None = None, log: Callable[[str], None] | None = None) -> ReportData:
    """Validate the inputs, score both systems, run the paired bootstrap, collect the images."""
    log = log or (lambda msg: None)
    label = check_names(names)
    keys = parse_metrics(metrics)
    if resamples < 1:
        raise ValueError(f"--resamples must be >= 1, got {resamples}")
    if not 32 <= thumb <= 1024:
        raise ValueError(f"--thumb must be between 32 and 1024 pixels, got {thumb}")
    references, res_a, res_b = load_pair(a, b, refs, split)
    ids = list(res_a)
    srcs = image_sources(ids, refs, images, link=link_images, out=out, thumb=thumb) if images else {}
    log(f"scoring {len(ids)} images of both systems ({', '.join(keys)})")
    ev_a = evaluate_captions(res_a, references, keys, corenlp_dir=corenlp_dir, log=log)
    ev_b = evaluate_captions(res_b, references, keys, corenlp_dir=corenlp_dir, log=log)
    rows = paired_bootstrap(ev_a, ev_b, resamples=resamples, seed=seed)
    shown = [m for k in keys for m in NAMES[k] if m in ev_a.per_image and m in ev_b.per_image]
    if not shown:
        reasons = "; ".join(f"{NAMES[k][0]}: {r}" for k, r in {**ev_a.unavailable, **ev_b.unavailable}.items())
        raise ValueError(f"none of the metrics {', '.join(keys)} could run here ({reasons}); "
                         "add a Java-free one, e.g. --metrics bleu,rouge,cider")
    return ReportData(label, (str(a), str(b), str(refs)), ids, [res_a[k] for k in ids], [res_b[k] for k in ids],
                      [references[k] for k in ids], shown, ev_a.per_image, ev_b.per_image, rows,
                      {**ev_a.unavailable, **ev_b.unavailable}, srcs, resamples, seed)


# ---------------------------------------------------------------- HTML

def _e(text: Any) -> str:
    """HTML-escape anything (quotes too, so it is safe in attributes)."""
    return html.escape(str(text), quote=True)


SHOWN_ZERO = 0.00005  # a difference this small prints as 0.0000: shown as no difference, in grey


def _num(x: float, signed: bool = False) -> str:
    """Four decimals (``signed``: with + or -); a value that rounds to zero is ``0.0000``, never
    ``-0.0000``."""
    if abs(x) < SHOWN_ZERO:
        return "0.0000"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def _diff_class(d: float) -> str:
    """The colour of a difference B - A as printed: green, red, or grey for 0.0000."""
    return "pos" if d >= SHOWN_ZERO else "neg" if d <= -SHOWN_ZERO else "zero"


def summary_html(data: ReportData) -> str:
    """The bootstrap table with the sort buttons of each metric."""
    na, nb = (_e(n) for n in data.names)
    head = (f"<tr><th>metric</th><th>{na}</th><th>{nb}</th><th>{nb} &minus; {na}</th><th>95% interval</th>"
            f"<th>p</th><th>sort images by the largest difference</th></tr>")
    body = []
    for r in data.comparison:
        if r.metric not in data.metrics:
            continue
        m = _e(r.metric)
        sig = " sig" if r.p_value < 0.05 else ""
        flag = " *" if r.approximate else ""
        buttons = (f'<button type="button" class="sort" id="sort-{m}-b" data-metric="{m}" data-order="b">'
                   f'{nb} better first</button> '
                   f'<button type="button" class="sort" id="sort-{m}-a" data-metric="{m}" data-order="a">'
                   f'{na} better first</button> '
                   f'<button type="button" class="sort" id="sort-{m}-abs" data-metric="{m}" data-order="abs">'
                   f'largest |difference|</button>')
        body.append(f'<tr class="summary-row{sig}" data-metric="{m}"><td>{m}{flag}</td><td>{_num(r.a)}</td>'
                    f'<td>{_num(r.b)}</td><td class="{_diff_class(r.diff)}">{_num(r.diff, True)}</td>'
                    f'<td>[{_num(r.low, True)}, {_num(r.high, True)}]</td><td>{r.p_value:.4f}</td>'
                    f'<td class="buttons">{buttons}</td></tr>')
    notes = []
    if any(r.approximate for r in data.comparison):
        notes.append("* resampled as the mean of per-image scores (Meteor's corpus aggregate needs Java per resample)")
    notes += [f"{NAMES[k][0]}: unavailable ({_e(reason)})" for k, reason in data.unavailable.items()]
    note = "".join(f'<p class="note">{n}</p>' for n in notes)
    return (f'<table id="summary"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="note">Paired bootstrap over the {len(data.image_ids)} images ({data.resamples} resamples, '
            f'seed {data.seed}), as <code>catcap compare</code>: corpus scores on the same resampled image sets, '
            f'the observed difference, its 95% percentile interval and a two-sided p-value. '
            f'Bold rows: p &lt; 0.05.</p>{note}')


def _scores_table(data: ReportData, i: int) -> str:
    na, nb = (_e(n) for n in data.names)
    rows = []
    for m in data.metrics:
        a, b = float(data.per_image_a[m][i]), float(data.per_image_b[m][i])
        rows.append(f'<tr><td>{_e(m)}</td><td>{_num(a)}</td><td>{_num(b)}</td>'
                    f'<td class="{_diff_class(b - a)}">{_num(b - a, True)}</td></tr>')
    return (f'<table class="scores"><tr><th></th><th>{na}</th><th>{nb}</th><th>&Delta;</th></tr>'
            f'{"".join(rows)}</table>')


def row_html(data: ReportData, i: int, diffs: list[float]) -> str:
    """One image: picture, both captions, the references and the per-image scores
    (``diffs``: this image's B - A per metric, for the sorting script)."""
    image_id = data.image_ids[i]
    src = data.images.get(image_id)
    picture = f'<img src="{_e(src)}" alt="image {_e(image_id)}" loading="lazy">' if src else ""
    if src and not src.startswith("data:"):
        picture = f'<a href="{_e(src)}">{picture}</a>'
    refs = "".join(f"<li>{_e(r)}</li>" for r in data.references[i])
    return (f'<tr class="image-row" data-index="{i}" data-image-id="{_e(image_id)}" '
            f'data-diffs="{_e(json.dumps(diffs))}">'
            f'<td class="pic">{picture}<div class="id">{_e(image_id)}</div></td>'
            f'<td class="cap cap-a">{_e(data.captions_a[i])}</td><td class="cap cap-b">{_e(data.captions_b[i])}</td>'
            f'<td class="refs"><ol>{refs}</ol></td><td>{_scores_table(data, i)}</td></tr>')


def controls_html(data: ReportData) -> str:
    """The filter box, the 'who is better' filter and the row count."""
    na, nb = (_e(n) for n in data.names)
    options = "".join(f'<option value="{_e(m)}"{" selected" if m == data.metrics[-1] else ""}>{_e(m)}</option>'
                      for m in data.metrics)
    return (f'<div id="controls"><label>filter <input id="filter" type="search" '
            f'placeholder="words in a caption or reference, or an image id"></label> '
            f'<label>show <select id="who"><option value="all">all images</option>'
            f'<option value="b">{nb} better</option><option value="a">{na} better</option>'
            f'<option value="tie">equal</option></select></label> '
            f'<label>on <select id="who-metric">{options}</select></label> '
            f'<button type="button" id="sort-original">original order</button> '
            f'<span id="count"></span> <span id="sorted-by"></span></div>')


def render_html(data: ReportData) -> str:
    """The whole page: inline CSS and JavaScript, nothing fetched from the network."""
    na, nb = (_e(n) for n in data.names)
    diffs = np.stack([data.diffs(m) for m in data.metrics], axis=1).round(10).tolist()  # (images, metrics)
    rows = "\n".join(row_html(data, i, diffs[i]) for i in range(len(data.image_ids)))
    meta = json.dumps({"metrics": data.metrics, "names": list(data.names), "zero": SHOWN_ZERO}).replace("<", "\\u003c")
    src_a, src_b, src_r = (_e(s) for s in data.sources)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>catcap report: {na} vs {nb}</title>
<style>{REPORT_CSS}</style></head>
<body>
<h1>{na} <span class="vs">vs</span> {nb}</h1>
<p class="meta">{len(data.image_ids)} images &middot; {na} = <code>{src_a}</code> &middot;
{nb} = <code>{src_b}</code> &middot; references <code>{src_r}</code></p>
{summary_html(data)}
{controls_html(data)}
<table id="images"><thead><tr><th>image</th><th>{na}</th><th>{nb}</th><th>references</th>
<th>per-image scores</th></tr></thead>
<tbody>
{rows}
</tbody></table>
<script type="application/json" id="report-meta">{meta}</script>
<script>{REPORT_JS}</script>
</body></html>
"""


def write_report(out: str | Path, a: str | Path, b: str | Path, refs: str | Path, **kwargs) -> ReportData:
    """Compute the report (see :func:`compute_report`) and write it to ``out`` atomically."""
    out = Path(out)
    if out.is_dir():
        raise IsADirectoryError(f"--out {out} is a folder; expected the path of the HTML file to write "
                                "(e.g. --out report.html)")
    data = compute_report(a, b, refs, out=out, **kwargs)
    write_text_atomic(out, render_html(data))
    return data
