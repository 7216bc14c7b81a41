"""The limits of ``catcap serve`` (no web framework here): what an upload may be, and the
bounded queue in front of the model.

* :class:`Limits`: upload bytes, image types, pixel count, queue length, per-request timeout.
* :func:`open_image` / :func:`decode_image`: an upload's bytes -> a checked, decoded RGB photo.
  The type is sniffed from the content by Pillow (the declared content type is only checked to
  be an image type or ``application/octet-stream``); the pixel count is checked from the
  header, before any pixel is decoded (so a small file claiming 100000 x 100000 pixels costs
  nothing); a truncated or corrupt file fails while decoding.
* :class:`Gate`: ``running`` jobs on worker threads plus at most ``waiting`` queued ones; one
  more is refused at once (:class:`Busy`), a job past its time limit is answered with
  :class:`TimedOut` (a queued one is dropped; a running one finishes on its thread and keeps
  its place until then, so the work in flight stays bounded).

Every refusal is an :class:`UploadError` with an HTTP status, a machine-readable code and a
message saying what was expected, what was found and how to fix it.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

#: Pillow format name -> the content type a browser gives such a file
IMAGE_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}
#: declared content types accepted for an upload (the content itself decides the format)
DECLARED_OK = {*IMAGE_TYPES.values(), "image/jpg", "image/pjpeg", "application/octet-stream", ""}


@dataclass
class Limits:
    """What ``catcap serve`` accepts. Defaults: 10 MB uploads, JPEG/PNG/WebP, 25 megapixels,
    1 request running + 4 waiting, 30 s per request (queue wait included), beam 1..10, 1..40 words."""

    max_upload_bytes: int = 10 * 1024 * 1024
    max_pixels: int = 25_000_000
    formats: tuple[str, ...] = tuple(IMAGE_TYPES)
    running: int = 1
    waiting: int = 4
    timeout_s: float = 30.0
    max_beam: int = 10
    max_words: int = 40

    def check(self) -> "Limits":
        """ValueError for a limit that cannot work (named as the CLI option)."""
        problems = []
        if self.max_upload_bytes < 1024:
            problems.append(f"--max-upload-mb gives {self.max_upload_bytes} bytes; expected at least 1 KiB")
        if self.max_pixels < 64 * 64:
            problems.append(f"--max-pixels {self.max_pixels} is below 4096 (64 x 64); expected e.g. 25000000")
        if self.running < 1:
            problems.append(f"running jobs must be >= 1, got {self.running}")
        if self.waiting < 0:
            problems.append(f"--queue {self.waiting}: expected 0 or more waiting requests")
        if not self.timeout_s > 0:
            problems.append(f"--timeout {self.timeout_s}: expected a positive number of seconds")
        unknown = [f for f in self.formats if f not in IMAGE_TYPES]
        if unknown or not self.formats:
            problems.append(f"image formats {list(self.formats)}: expected some of {', '.join(IMAGE_TYPES)}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def public(self) -> dict:
        """The limits as the page and /health show them."""
        return {"max_upload_bytes": self.max_upload_bytes, "max_pixels": self.max_pixels,
                "formats": list(self.formats), "types": [IMAGE_TYPES[f] for f in self.formats],
                "running": self.running, "waiting": self.waiting, "timeout_s": self.timeout_s,
                "max_beam": self.max_beam, "max_words": self.max_words}


class UploadError(Exception):
    """A refused request: HTTP ``status``, a ``code``, and expected / found / fix."""

    def __init__(self, status: int, code: str, expected: str, found: str, fix: str, headers: dict | None = None):
        self.status, self.code, self.expected, self.found, self.fix = status, code, expected, found, fix
        self.headers = headers or {}
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return f"{self.found}; expected {self.expected}. {self.fix}"

    def to_json(self) -> dict:
        return {"error": {"status": self.status, "code": self.code, "message": self.message,
                          "expected": self.expected, "found": self.found, "fix": self.fix}}


class Busy(UploadError):
    """The queue is full (HTTP 503, with Retry-After)."""


class TimedOut(UploadError):
    """A request ran past the per-request time limit (HTTP 504)."""


def _either(names) -> str:
    """("JPEG", "PNG", "WEBP") -> "JPEG, PNG or WEBP"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.2f} MB ({n:,} bytes)" if n >= 1024 * 1024 else f"{n:,} bytes"


def too_large(size: int | str, limits: Limits) -> UploadError:
    return UploadError(413, "too_large", f"an image of at most {_mb(limits.max_upload_bytes)}",
                       f"the upload is {size if isinstance(size, str) else _mb(size)}",
                       "Send a smaller file (e.g. resized to 1024 pixels on the long side); the server's "
                       "limit is set with catcap serve --max-upload-mb")


def check_declared_type(content_type: str | None, filename: str | None) -> None:
    """The file part's declared content type must be an image type (or unknown / octet-stream)."""
    declared = (content_type or "").split(";")[0].strip().lower()
    if declared not in DECLARED_OK:
        name = f"the file {filename}" if filename else "the upload"
        raise UploadError(415, "wrong_content_type", "an image file (JPEG, PNG or WebP; declared as image/jpeg, "
                          "image/png, image/webp or application/octet-stream)", f"{name} is declared as {declared!r}",
                          "Upload a photo file (.jpg, .png, .webp)")


def open_image(data: bytes, limits: Limits, filename: str | None = None):
    """Bytes -> a Pillow image whose header has been read and checked (format, pixel count);
    no pixel is decoded yet (:func:`decode_image` does that)."""
    from PIL import Image, UnidentifiedImageError

    name = f"the file {filename}" if filename else "the upload"
    allowed = _either(limits.formats)
    if not data:
        raise UploadError(400, "empty_upload", f"a {allowed} image", f"{name} is empty (0 bytes)",
                          "Choose the photo again; the file may not have been read")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the pixel limit below decides
            image = Image.open(io.BytesIO(data), formats=None)
    except Image.DecompressionBombError as err:
        raise UploadError(413, "too_many_pixels", f"at most {limits.max_pixels:,} pixels",
                          f"{name} claims more pixels than Pillow will decode ({err})",
                          "Resize the photo (e.g. to 1024 pixels on the long side)") from None
    except UnidentifiedImageError:
        start = data[:16]
        raise UploadError(415, "not_an_image", f"a {allowed} image",
                          f"{name} is not an image Pillow can read ({len(data)} bytes, starting {start!r})",
                          "Upload a photo file (.jpg, .png, .webp)") from None
    fmt = image.format or "unknown"
    if fmt not in limits.formats:
        raise UploadError(415, "unsupported_type", f"a {allowed} image", f"{name} is a {fmt} image",
                          "Convert it to JPEG or PNG first")
    width, height = image.size
    if width < 1 or height < 1 or width * height > limits.max_pixels:
        raise UploadError(413, "too_many_pixels", f"at most {limits.max_pixels:,} pixels",
                          f"{name} is {width} x {height} = {width * height:,} pixels",
                          "Resize the photo (e.g. to 1024 pixels on the long side); the server's limit is set "
                          "with catcap serve --max-pixels")
    return image


def decode_image(image, filename: str | None = None):
    """Decode every pixel of an :func:`open_image` image -> RGB PIL image; a truncated or
    corrupt file is an UploadError (400)."""
    name = f"the file {filename}" if filename else "the upload"
    try:
        image.load()
        from catcap.features.efficientnet import to_rgb

        return to_rgb(image)  # as catcap extract / caption: 16-bit grey is scaled to 8 bits, not clipped
    except (OSError, ValueError, SyntaxError) as err:  # Pillow: "image file is truncated", broken data
        raise UploadError(400, "broken_image", f"a complete {image.format} image",
                          f"{name} could not be decoded: {err}",
                          "The file is truncated or corrupt; save or download it again") from None


class Gate:
    """At most ``running`` jobs on worker threads and ``waiting`` more queued; see module doc."""

    def __init__(self, running: int = 1, waiting: int = 4):
        self.capacity = running + waiting
        self.running, self.waiting = running, waiting
        self.pool = ThreadPoolExecutor(max_workers=running, thread_name_prefix="catcap-serve")
        self._lock = threading.Lock()
        self.inside = self.served = self.refused = self.timed_out = 0

    def _leave(self, _future) -> None:
        with self._lock:
            self.inside -= 1

    def stats(self) -> dict:
        with self._lock:
            return {"in_flight": self.inside, "capacity": self.capacity, "served": self.served,
                    "refused": self.refused, "timed_out": self.timed_out}

    async def run(self, job, timeout_s: float):
        """``job(queue_seconds)`` on a worker thread; Busy when the gate is full, TimedOut after
        ``timeout_s`` (queue wait included)."""
        with self._lock:
            if self.inside >= self.capacity:
                self.refused += 1
                raise Busy(503, "busy", f"at most {self.running} running + {self.waiting} waiting requests",
                           f"{self.inside} requests are already in the server",
                           "Try again in a few seconds (the server's queue is set with catcap serve --queue)",
                           headers={"Retry-After": "2"})
            self.inside += 1
        queued = time.perf_counter()
        future = self.pool.submit(lambda: job(time.perf_counter() - queued))
        future.add_done_callback(self._leave)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except asyncio.TimeoutError:
            future.cancel()  # a queued job never starts; a running one ends on its thread
            with self._lock:
                self.timed_out += 1
            raise TimedOut(504, "timeout", f"an answer within {timeout_s:g} s",
                           f"the request took longer than {timeout_s:g} s (waiting for the model included)",
                           "Try again with a smaller beam or shorter max length, or when the server is less "
                           "busy (the limit is set with catcap serve --timeout)") from None
        with self._lock:
            self.served += 1
        return result

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
