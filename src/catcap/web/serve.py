"""``catcap serve``: the web demo, a FastAPI app over one loaded checkpoint (and, on demand,
the other models it offers).

    from catcap.web.serve import create_app
    app = create_app("flickr8k-m2", samples="photos/", choices={"flickr8k-cat": "flickr8k-cat"})
    # then: uvicorn.run(app)

Routes:

* ``GET /``: the page (one self-contained HTML file, no network needed): upload a photo or pick
  a sample, pick the model, set beam size and max length, see the caption and, for models that
  record it, the attention over the image for each word and, for CAT models, the history weight
  per word (paper Fig. 5); for other models the page says in plain words that there is none.
* ``POST /api/caption``: multipart form with ``image`` (a file) or ``sample`` (a sample's name),
  optional ``beam``, ``max_length`` and ``model`` (one of the offered models); returns JSON (see
  :func:`caption_json`). Errors are JSON ``{"error": {status, code, message, expected, found,
  fix}}`` with a 4xx/5xx status.
* ``GET /health``: status, model, the offered models, limits, queue counters, model loads in
  this process.
* ``GET /samples/{name}``: a sample photo.

The served model is loaded once, when the app is created; another offered model is loaded the
first time a request picks it (on the worker thread) and kept. Inference runs on a worker
thread behind a bounded queue (:class:`catcap.web.serve_limits.Gate`), so the event loop keeps
answering.
"""

# no `from __future__ import annotations`: FastAPI reads the routes' annotations (Request) at runtime
import contextlib
import json
import logging
import time
from importlib import resources
from pathlib import Path

from catcap.web.serve_limits import Gate, Limits, UploadError, check_declared_type, decode_image, open_image, too_large

log = logging.getLogger("catcap.serve")

SAMPLE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
MAX_SAMPLES = 48
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and small fields on top of the file itself

WEB_EXTRA_HELP = "catcap serve needs the web extra: pip install -e '.[web]' (fastapi, uvicorn, python-multipart)"


def check_web_extra() -> None:
    """ValueError naming the install command when FastAPI, uvicorn or python-multipart is missing."""
    import importlib.util

    missing = [m for m, mod in (("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("python-multipart", "multipart"))
               if importlib.util.find_spec(mod) is None]
    if missing:
        raise ValueError(f"missing package(s) {', '.join(missing)}; {WEB_EXTRA_HELP}")


def find_samples(folder: str | Path | None) -> dict[str, Path]:
    """{file name: path} of the photos directly in ``folder`` (sorted, at most MAX_SAMPLES)."""
    if not folder:
        return {}
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"--samples {folder}: not a folder; expected a folder of .jpg/.png/.webp photos")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SAMPLE_SUFFIXES)
    if not files:
        raise ValueError(f"--samples {folder} holds no .jpg/.png/.webp photo; expected a folder of photos")
    return {p.name: p for p in files[:MAX_SAMPLES]}


def _rounded(values, digits: int = 4):
    return None if values is None else [round(float(v), digits) for v in values]


def attention_note(model_name: str) -> str:
    """What the page says, in plain words, for a model that records no attention per word."""
    return (f"This {model_name} model does not record where in the photo each word came from, so there is no map "
            "to show. CAT models do.")


def caption_json(result: dict, image, settings: dict, model_name: str = "") -> dict:
    """The model's result for one photo -> the JSON answer of ``POST /api/caption``:
    caption, words, tokens (words + ``<eos>``), image {width, height, format}, settings,
    attention {layer, num_layers, boxes (N, 4) pixels, regions (T, N) or null, history_weight (T,)
    or null, history [{labels, weights}] per token or null, note}, timings_ms. ``note`` says
    why ``regions`` is null (:func:`attention_note`)."""
    att = result["attention"]
    note = None
    if att.regions is None:
        note = attention_note(model_name or "")
    history = None
    if att.history is not None:
        history = [{"labels": labels, "weights": _rounded(w)} for labels, w in zip(att.history_labels, att.history)]
    return {
        "caption": result["caption"], "words": result["words"], "tokens": result["tokens"],
        "image": {"width": image.width, "height": image.height, "format": image.format},
        "settings": settings,
        "attention": {"layer": att.layer, "num_layers": att.num_layers,
                      "boxes": [_rounded(b, 1) for b in result["boxes"]],
                      "regions": None if att.regions is None else [_rounded(r) for r in att.regions],
                      "history_weight": _rounded(att.history_weight), "history": history, "note": note},
        "timings_ms": {k: round(v, 1) for k, v in result["timings_ms"].items()},
    }


def _int_field(form, name: str, default: int, low: int, high: int, option: str) -> int:
    raw = form.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw))
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise UploadError(422, f"bad_{name}", f"{name} as a whole number from {low} to {high}",
                          f"{name}={str(raw)[:40]!r}", f"Set {option} between {low} and {high}")
    return value


class BodyLimit:
    """ASGI middleware: a request body to ``path`` over ``max_bytes`` is answered 413 (from the
    Content-Length header before anything is read, else while the body streams in)."""

    class TooLarge(Exception):
        pass

    def __init__(self, app, path: str, max_bytes: int, limits: Limits):
        self.app, self.path, self.max_bytes, self.limits = app, path, max_bytes, limits

    async def _refuse(self, send, size) -> None:
        from starlette.responses import JSONResponse

        err = too_large(size, self.limits)
        response = JSONResponse(err.to_json(), status_code=err.status, headers={"Connection": "close"})
        await response({"type": "http"}, None, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send, int(declared))  # the whole form: within FORM_OVERHEAD of the file
        seen, started = 0, False

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyLimit.TooLarge()
            return message

        async def watched_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyLimit.TooLarge:
            if not started:
                await self._refuse(send, f"more than {seen} bytes")


def _page(config: dict) -> str:
    """The page with its settings filled in (JSON inside a <script>, '<' escaped)."""
    html = resources.files("catcap.web").joinpath("static/serve.html").read_text(encoding="utf-8")
    blob = json.dumps(config).replace("<", "\\u003c")
    return html.replace("/*CATCAP_CONFIG*/null", blob)


class Models:
    """The models a server offers: the served one (loaded) and ``choices`` ({name: label}, each
    name something ``Captioner.from_pretrained`` reads, e.g. a zoo name), loaded on first use."""

    def __init__(self, default, default_name: str, choices: dict | None, make):
        self.default, self.make = default_name, make
        self.labels = {default_name: (choices or {}).get(default_name, default_name)}
        self.labels.update({k: v for k, v in (choices or {}).items() if k != default_name})
        self.loaded = {default_name: default}

    def get(self, name: str):
        """The model ``name`` (loaded now if it was not yet; call on the worker thread)."""
        if name not in self.loaded:
            self.loaded[name] = self.make(name)
        return self.loaded[name]

    def public(self) -> list[dict]:
        return [{"name": k, "label": v, "loaded": k in self.loaded} for k, v in self.labels.items()]


def served_name(checkpoint) -> str:
    """How the page names the served model: a zoo model's name, else the checkpoint as given."""
    from catcap import zoo

    text = str(getattr(checkpoint, "checkpoint", checkpoint))
    path = Path(text)
    return path.name if path.is_dir() and zoo.is_zoo_folder(path) else text


def create_app(checkpoint, *, limits: Limits | None = None, samples: str | Path | None = None,
               backend: str = "auto", device: str = "cpu", layer: int = -1, log_fn=print,
               choices: dict | None = None):
    """The FastAPI app of ``catcap serve`` over ``checkpoint`` (a checkpoint folder, a zoo name, or
    an already loaded :class:`catcap.web.serve_model.PhotoCaptioner`). The model loads here, once;
    ``choices`` ({name: label}) are the other models the page offers, loaded when first picked."""
    check_web_extra()
    from fastapi import FastAPI, Request
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
    from starlette.datastructures import UploadFile

    from catcap.decoding import GenerationConfig
    from catcap.web.serve_model import PhotoCaptioner, model_loads

    limits = (limits or Limits()).check()
    sample_files = find_samples(samples)
    model = checkpoint if isinstance(checkpoint, PhotoCaptioner) else PhotoCaptioner(
        checkpoint, backend=backend, device=device, layer=layer, log=log_fn)
    models = Models(model, served_name(checkpoint), choices, lambda name: PhotoCaptioner(
        name, backend=backend, device=device, layer=layer, log=log_fn))
    gate = Gate(limits.running, limits.waiting)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        gate.close()

    app = FastAPI(title="catcap serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.model, app.state.gate, app.state.limits = model, gate, limits
    app.add_middleware(BodyLimit, path="/api/caption", max_bytes=limits.max_upload_bytes + FORM_OVERHEAD,
                       limits=limits)
    defaults = GenerationConfig()  # the form starts at generation's defaults, as `catcap caption`
    page = _page({"model": model.info, "default": models.default, "models": models.public(),
                  "limits": limits.public(), "samples": list(sample_files),
                  "generation": {"beam": defaults.num_beams, "max_length": defaults.max_length}})

    def error_response(err: UploadError) -> JSONResponse:
        return JSONResponse(err.to_json(), status_code=err.status, headers=err.headers)

    @app.get("/", response_class=HTMLResponse)
    async def index():
        return HTMLResponse(page)

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model.info, "models": models.public(), "model_loads": model_loads(),
                "limits": limits.public(), "queue": gate.stats()}

    @app.get("/samples/{name}")
    async def sample(name: str):
        if name not in sample_files:
            err = UploadError(404, "no_such_sample", f"one of {len(sample_files)} samples", f"no sample {name!r}",
                              "Pick a sample from the page's list (start the server with --samples DIR)")
            return error_response(err)
        return FileResponse(sample_files[name])

    async def read_request(request: Request):
        """-> (bytes, file name, beam, max_length, model name); UploadError for a bad request."""
        kind = request.headers.get("content-type", "")
        if not kind.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
            raise UploadError(415, "wrong_content_type", "a multipart/form-data request with the photo in the "
                              "field 'image' (or a sample name in 'sample')", f"a request of type {kind or 'none'!r}",
                              "Send a form upload, e.g. curl -F image=@photo.jpg http://HOST:PORT/api/caption")
        try:
            form = await request.form(max_files=2, max_fields=10)
        except BodyLimit.TooLarge:
            raise
        except Exception as err:  # malformed multipart bodies
            raise UploadError(400, "bad_form", "a well-formed multipart/form-data body",
                              f"the form could not be parsed ({err})", "Send the photo with a browser form or "
                              "curl -F image=@photo.jpg") from None
        try:  # the form's files (spooled to disk past 1 MB) are closed whatever happens
            return await read_form(form)
        finally:
            await form.close()

    async def read_form(form):
        """A parsed form -> (bytes, file name, beam, max_length, model name); UploadError for a bad one."""
        default = GenerationConfig()  # the page's defaults are generation's (beam 3, 20 words)
        beam = _int_field(form, "beam", default.num_beams, 1, limits.max_beam, "the beam size")
        max_length = _int_field(form, "max_length", default.max_length, 1, limits.max_words, "the max length")
        name = str(form.get("model") or models.default)
        if name not in models.labels:
            raise UploadError(404, "no_such_model", f"one of the models {list(models.labels)}",
                              f"model={name[:80]!r}", "Pick a model from the page's list")
        upload, sample_name = form.get("image"), form.get("sample")
        if isinstance(upload, UploadFile):
            check_declared_type(upload.content_type, upload.filename)
            data = await upload.read(limits.max_upload_bytes + 1)
            if len(data) > limits.max_upload_bytes:
                raise too_large(upload.size or len(data), limits)
            return data, upload.filename, beam, max_length, name
        if sample_name:
            if str(sample_name) not in sample_files:
                raise UploadError(404, "no_such_sample", f"one of the samples {list(sample_files)[:5]}",
                                  f"sample={str(sample_name)[:80]!r}", "Pick a sample from the page's list")
            return sample_files[str(sample_name)].read_bytes(), str(sample_name), beam, max_length, name
        found = "a text field 'image'" if upload is not None else f"the fields {sorted(form.keys())}"
        raise UploadError(400, "no_image", "a file in the form field 'image' (or a sample name in 'sample')",
                          found, "Choose a photo, e.g. curl -F image=@photo.jpg http://HOST:PORT/api/caption")

    @app.post("/api/caption")
    async def caption(request: Request):
        started = time.perf_counter()
        try:
            data, name, beam, max_length, chosen = await read_request(request)
            image = open_image(data, limits, name)  # header only: type and pixel count

            def job(queue_s: float) -> dict:
                t0 = time.perf_counter()
                rgb = decode_image(image, name)
                decoded = time.perf_counter()
                picked = models.get(chosen)
                loaded = time.perf_counter()
                result = picked.caption(rgb, GenerationConfig(num_beams=beam, max_length=max_length))
                result["timings_ms"] = {"queue": 1000 * queue_s, "decode": 1000 * (decoded - t0),
                                        **({"load": 1000 * (loaded - decoded)} if loaded - decoded > 0.05 else {}),
                                        **result["timings_ms"]}
                result["info"] = picked.info
                return result

            result = await gate.run(job, limits.timeout_s)
        except BodyLimit.TooLarge:
            raise  # answered 413 by the BodyLimit middleware
        except UploadError as err:
            log.info("refused: %s %s", err.code, err.found)
            return error_response(err)
        except Exception as err:  # a model or encoder failure: answer, log, keep serving
            log.exception("caption failed")
            return JSONResponse({"error": {"status": 500, "code": "internal", "message": f"captioning failed: {err}",
                                           "expected": "a caption", "found": f"{type(err).__name__}: {err}",
                                           "fix": "See the server's log; try another photo"}}, status_code=500)
        answer = caption_json(result, image, {"beam": beam, "max_length": max_length, "source": name,
                                              "model": chosen}, result["info"]["name"])
        answer["timings_ms"]["total"] = round(1000 * (time.perf_counter() - started), 1)
        answer["model"] = result["info"]
        return answer

    return app
