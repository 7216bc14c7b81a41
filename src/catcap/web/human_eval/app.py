"""``catcap human-eval serve``: the rating pages of a study (FastAPI).

- ``GET /``: a rater types their id (the study's organiser hands these out, or sends the link
  ``/rate/<rater>`` directly).
- ``GET /rate/<rater>``: the rater's first image not yet rated, in the rater's own order (so a
  rater who comes back resumes there), with both captions left and right as the study recorded
  (system names never shown), one question per criterion (left / no preference / right) and
  the progress ("12 / 100 rated"). ``?item=K`` shows item K again (its earlier answer checked).
- ``POST /rate/<rater>``: stores the answer (``action=save``) or a skip (``action=skip``), every
  criterion in one transaction, replacing an earlier answer; then redirects to the next image.
- ``GET /images/<item>.jpg``: the study's copy of an image; ``GET /api/progress/<rater>``: JSON.

Bad input (unknown rater, item out of range, an unanswered question) gets a page that says
what is wrong, with status 400/404; the server keeps running.
"""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response

from catcap.web.human_eval.study import Study, load_study

SIDES = ("left", "none", "right")
CSS = """
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; background: #f3f5f7;
       color: #1d2329; }
main { max-width: 900px; margin: 0 auto; padding: 1.2em 1.4em 2em; }
header { display: flex; justify-content: space-between; align-items: baseline; }
h1 { font-size: 1.3em; margin: .2em 0 .6em; }
.progress { color: #4a545e; }
.bar { height: 6px; background: #dde2e7; border-radius: 3px; margin: .2em 0 1em; }
.bar div { height: 6px; background: #2f6fb0; border-radius: 3px; }
.photo { text-align: center; background: #fff; padding: .8em; border-radius: 6px;
         box-shadow: 0 1px 3px rgba(0,0,0,.1); }
.photo img { height: min(320px, 40vh); max-width: 100%; object-fit: contain; }
.captions { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; margin: 1em 0; }
.caption { background: #fff; border-radius: 6px; padding: .8em 1em; box-shadow: 0 1px 3px rgba(0,0,0,.1);
           font-size: 1.1em; }
.caption .label { display: block; font-size: .75em; color: #6b7680; text-transform: uppercase; letter-spacing: .05em; }
fieldset { border: 0; background: #fff; border-radius: 6px; margin: 0 0 .8em; padding: .7em 1em;
           box-shadow: 0 1px 3px rgba(0,0,0,.1); }
legend { font-weight: 600; padding: 0; float: left; width: 100%; margin-bottom: .3em; }
legend small { font-weight: normal; color: #6b7680; }
.choices { display: grid; grid-template-columns: 1fr 1fr 1fr; gap: .5em; clear: both; }
.choices label { border: 1px solid #c4ccd4; border-radius: 5px; padding: .4em; text-align: center; cursor: pointer;
                 background: #f8f9fa; }
.choices input { margin-right: .4em; }
.choices label:has(input:checked) { background: #2f6fb0; border-color: #2f6fb0; color: #fff; }
.actions { display: flex; gap: .8em; align-items: center; }
button { font: inherit; padding: .45em 1.2em; border-radius: 5px; border: 1px solid #2f6fb0; background: #2f6fb0;
         color: #fff; cursor: pointer; }
button.secondary { background: #fff; color: #2f6fb0; }
.error { background: #fdecea; border: 1px solid #e0a39b; padding: .6em 1em; border-radius: 5px; }
a { color: #2f6fb0; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    """A complete HTML page with the app's inline style."""
    return HTMLResponse(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                        f'<title>{_e(title)}</title><style>{CSS}</style></head><body><main>{body}</main></body></html>',
                        status_code=status)


def error_page(message: str, status: int, back: str = "/") -> HTMLResponse:
    return page("problem", f'<h1>Something is not right</h1><p class="error" id="error">{_e(message)}</p>'
                           f'<p><a href="{_e(back)}">back</a></p>', status)


def rated_items(study: Study, rater: str) -> dict[int, dict[str, str]]:
    """{item: {criterion: choice}} of the items this rater answered fully (or skipped)."""
    return {i: a for i, a in study.store().answers(rater).items() if set(study.criteria) <= set(a)}


def next_item(study: Study, rater: str, done: dict) -> int | None:
    """The first item of the rater's order that is not rated yet (None when all are)."""
    return next((i for i in study.raters[rater]["order"] if i not in done), None)


def _choice_to_side(study: Study, rater: str, item: int, choice: str | None) -> str | None:
    if choice in (None, "skip"):
        return None
    if choice == "none":
        return "none"
    return "left" if choice == study.left_system(rater, item) else "right"


def _question(crit: dict, checked: str | None) -> str:
    key = _e(crit["key"])
    labels = {"left": "left caption", "none": "no preference", "right": "right caption"}
    options = "".join(
        f'<label><input type="radio" name="{key}" value="{side}" id="{key}-{side}" required'
        f'{" checked" if checked == side else ""}>{labels[side]}</label>' for side in SIDES)
    return (f'<fieldset><legend>{_e(crit["question"])} <small>({_e(crit["hint"])})</small></legend>'
            f'<div class="choices">{options}</div></fieldset>')


def rating_page(study: Study, rater: str, item: int, done: dict) -> HTMLResponse:
    """One image, its two captions in the recorded left/right order, the questions."""
    entry = study.items[item]
    left = study.left_system(rater, item)
    captions = {"A": entry["caption_a"], "B": entry["caption_b"]}
    right = "B" if left == "A" else "A"
    total, count = len(study.items), len(done)
    order = study.raters[rater]["order"]
    position = order.index(item)
    answer = done.get(item) or study.store().answers(rater).get(item, {})
    questions = "".join(_question(c, _choice_to_side(study, rater, item, answer.get(c["key"])))
                        for c in study.manifest["criteria"])
    previous = (f'<a id="previous" href="/rate/{_e(rater)}?item={order[position - 1]}">&larr; previous image</a>'
                if position > 0 else "")
    body = f"""<header><h1>Which caption is better?</h1>
<span class="progress" id="progress">{count} / {total} rated</span></header>
<div class="bar"><div style="width: {100 * count / total:.1f}%"></div></div>
<div class="photo"><img id="photo" src="/images/{item}.jpg" alt="image to describe"></div>
<div class="captions"><div class="caption" id="left-caption"><span class="label">left caption</span>{_e(captions[left])}</div>
<div class="caption" id="right-caption"><span class="label">right caption</span>{_e(captions[right])}</div></div>
<form method="post" action="/rate/{_e(rater)}" id="rating">
<input type="hidden" name="item" value="{item}">
{questions}
<div class="actions"><button type="submit" name="action" value="save" id="save">Save and next</button>
<button type="submit" name="action" value="skip" id="skip" class="secondary" formnovalidate>Skip this image</button>
{previous}<span class="progress">rater {_e(rater)} &middot; image {position + 1} of {total}</span></div>
</form>"""
    return page(f"rating {count + 1} / {total}", body)


def done_page(study: Study, rater: str) -> HTMLResponse:
    total = len(study.items)
    first = study.raters[rater]["order"][0]
    return page("thank you", f'<h1>Thank you!</h1><p id="progress">{total} / {total} rated: you have rated '
                             f'every image of this study.</p><p>To change an answer, '
                             f'<a href="/rate/{_e(rater)}?item={first}">go through the images again</a>; '
                             f'a new answer replaces the old one.</p>')


def landing_page(study: Study, message: str = "") -> HTMLResponse:
    error = f'<p class="error" id="error">{_e(message)}</p>' if message else ""
    criteria = "".join(f"<li>{_e(c['question'])} <small>({_e(c['hint'])})</small></li>"
                       for c in study.manifest["criteria"])
    return page("caption rating", f"""<h1>Caption rating</h1>
<p>You will see {len(study.items)} images, each with two captions written by computer programs. For each image,
answer:</p><ul>{criteria}</ul>
<p>Pick "no preference" when neither is better, or skip an image you cannot judge. You can stop at any
time: coming back with the same id resumes where you stopped.</p>{error}
<form method="get" action="/rate"><label>Your rater id <input name="rater" id="rater" required autofocus></label>
<button type="submit" id="start">Start</button></form>""", 400 if message else 200)


def _known(study: Study, rater: str) -> HTMLResponse | None:
    if rater not in study.raters:
        return error_page(f"there is no rater {rater!r} in this study; use the id (or the link) the study's "
                          "organiser gave you", 404)
    return None


def _parse_answer(study: Study, rater: str, form) -> tuple[int, dict[str, str]] | HTMLResponse:
    """(item, {criterion: 'A' | 'B' | 'none' | 'skip'}) from the posted form, or an error page."""
    back = f"/rate/{rater}"
    try:
        item = int(form.get("item", ""))
    except ValueError:
        return error_page(f"the form must send an item number; got {form.get('item')!r}", 400, back)
    if not 0 <= item < len(study.items):
        return error_page(f"item {item} is not in this study (it has items 0..{len(study.items) - 1})", 400, back)
    back = f"/rate/{rater}?item={item}"
    action = form.get("action", "save")
    if action == "skip":
        return item, {c: "skip" for c in study.criteria}
    if action != "save":
        return error_page(f"unknown action {action!r}; expected 'save' or 'skip'", 400, back)
    left = study.left_system(rater, item)
    sides = {"left": left, "right": "B" if left == "A" else "A", "none": "none"}
    choices = {}
    for crit in study.criteria:
        side = form.get(crit)
        if side not in sides:
            return error_page(f"please answer every question: for {crit!r} pick the left caption, the right "
                              f"caption or no preference (got {side!r}); or skip the image", 400, back)
        choices[crit] = sides[side]
    return item, choices


def create_app(study_dir: str | Path) -> FastAPI:
    """The rating app of one study folder (checked now, so a bad folder fails at start)."""
    study = load_study(study_dir)
    app = FastAPI(title="catcap human evaluation", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.raters = list(study.raters)

    @app.get("/", response_class=HTMLResponse)
    def landing() -> Response:
        return landing_page(study)

    @app.get("/rate", response_class=HTMLResponse)
    def enter(rater: str = "") -> Response:
        rater = rater.strip()
        if rater not in study.raters:
            return landing_page(study, f"there is no rater {rater!r} in this study; type the id the study's "
                                       "organiser gave you" if rater else "type your rater id")
        return RedirectResponse(f"/rate/{rater}", status_code=303)

    @app.get("/rate/{rater}", response_class=HTMLResponse)
    def rate(rater: str, item: int | None = None) -> Response:
        problem = _known(study, rater)
        if problem:
            return problem
        done = rated_items(study, rater)
        if item is not None and not 0 <= item < len(study.items):
            return error_page(f"item {item} is not in this study (it has items 0..{len(study.items) - 1})", 400,
                              f"/rate/{rater}")
        shown = item if item is not None else next_item(study, rater, done)
        return done_page(study, rater) if shown is None else rating_page(study, rater, shown, done)

    @app.post("/rate/{rater}", response_class=HTMLResponse)
    async def submit(rater: str, request: Request) -> Response:
        problem = _known(study, rater)
        if problem:
            return problem
        parsed = _parse_answer(study, rater, await request.form())
        if isinstance(parsed, HTMLResponse):
            return parsed
        item, choices = parsed
        study.store().record(rater, item, choices, study.left_system(rater, item))
        return RedirectResponse(f"/rate/{rater}", status_code=303)

    @app.get("/images/{item}.jpg")
    def image(item: int) -> Response:
        if not 0 <= item < len(study.items):
            return error_page(f"no image {item} in this study", 404)
        return FileResponse(study.folder / study.items[item]["image"], media_type="image/jpeg")

    @app.get("/api/progress/{rater}")
    def progress(rater: str) -> Response:
        if rater not in study.raters:
            return JSONResponse({"error": f"there is no rater {rater!r} in this study"}, status_code=404)
        done = rated_items(study, rater)
        return JSONResponse({"rater": rater, "rated": len(done), "total": len(study.items),
                             "next_item": next_item(study, rater, done)})

    return app
