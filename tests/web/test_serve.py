"""``catcap serve``: the web demo in-process (FastAPI's TestClient) and as a real server process
on 127.0.0.1, with a tiny CAT trained for one epoch on real Flickr8k photos (serve_fixtures.py).

Covered: a photo's caption equals ``catcap caption``'s, the per-word attention is the data
``catcap analyze`` records (checked against trace_greedy), bad uploads get 4xx JSON errors that
say what was expected, what was found and how to fix it, a burst beyond the queue bound is
answered 200 or 503 (never dropped), timeouts are 504, the model loads once per process, and
the CLI's errors for a checkpoint that cannot read photos and for a missing web extra."""

from __future__ import annotations

import io
import json
import struct
import threading
import zlib

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="catcap serve needs the web extra: pip install -e '.[web]'")
pytest.importorskip("multipart", reason="catcap serve needs the web extra: pip install -e '.[web]'")

from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import get_json, post_multipart, train_photo_cat  # noqa: E402
from web_helpers import free_port, start_server, stop_server  # noqa: E402

from catcap import api  # noqa: E402
from catcap.web.serve import create_app  # noqa: E402
from catcap.web.serve_limits import Limits  # noqa: E402
from catcap.web.serve_model import PhotoCaptioner  # noqa: E402

LIMITS = Limits(max_upload_bytes=1024 * 1024, max_pixels=4_000_000)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint dir, photo paths) of a tiny CAT on 6 Flickr8k photos."""
    return train_photo_cat(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def model(trained):
    return PhotoCaptioner(trained[0], backend="torch", log=lambda m: None)


@pytest.fixture(scope="module")
def client(model, trained):
    with TestClient(create_app(model, limits=LIMITS, samples=trained[1][0].parent)) as c:
        yield c


def post_photo(client, data: bytes, name="photo.jpg", kind="image/jpeg", **fields):
    return client.post("/api/caption", files={"image": (name, data, kind)}, data={k: str(v) for k, v in fields.items()})


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header(width: int, height: int) -> bytes:
    """A small PNG file whose header claims width x height pixels (valid chunks, a few bytes of data)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + png_chunk(b"IEND", b""))


def image_bytes(fmt: str, size=(64, 48)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, (200, 60, 30)).save(out, fmt)
    return out.getvalue()


def test_a_photo_gets_the_caption_catcap_caption_gives_and_its_attention_per_word(client, trained):
    checkpoint, photos = trained
    photo = photos[1]
    answer = post_photo(client, photo.read_bytes(), photo.name, beam=2, max_length=12)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    [(_, expected)] = api.caption(checkpoint, [str(photo)], num_beams=2, max_length=12)
    assert body["caption"] == expected
    assert body["tokens"] == body["words"] + ["<eos>"] and " ".join(body["words"]) == expected
    att, steps = body["attention"], len(body["tokens"])
    assert len(att["boxes"]) == 49 and len(att["regions"]) == steps and all(len(r) == 49 for r in att["regions"])
    width, height = body["image"]["width"], body["image"]["height"]
    boxes = np.array(att["boxes"])
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= width + 0.1).all() and (boxes[:, 3] <= height + 0.1).all()
    # CACA's final pass: region weights + history weights of a step sum to 1, and a_k is the history part
    for k in range(steps):
        history = att["history"][k]
        assert history["labels"] == (["<bos>"] + body["tokens"])[:len(history["labels"])]
        assert sum(history["weights"]) == pytest.approx(att["history_weight"][k], abs=2e-3)
        assert sum(att["regions"][k]) + att["history_weight"][k] == pytest.approx(1.0, abs=2e-3)
    assert set(body["timings_ms"]) == {"queue", "decode", "features", "caption", "attention", "total"}
    assert body["settings"]["beam"] == 2 and body["model"]["name"] == "CAT"


@pytest.mark.parametrize("fmt,kind", [("PNG", "image/png"), ("WEBP", "image/webp")])
def test_png_and_webp_uploads_of_the_same_pixels_get_the_jpegs_caption(client, trained, fmt, kind):
    from PIL import Image

    photo = trained[1][3]
    with Image.open(photo) as im:
        out = io.BytesIO()
        im.convert("RGB").save(out, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    as_jpeg = post_photo(client, photo.read_bytes(), beam=2, max_length=8).json()
    answer = post_photo(client, out.getvalue(), f"photo.{fmt.lower()}", kind, beam=2, max_length=8)
    assert answer.status_code == 200, answer.text
    assert answer.json()["image"]["format"] == fmt and answer.json()["caption"] == as_jpeg["caption"]


def test_greedy_attention_is_what_catcap_analyze_records(model, trained):
    """The attention of a greedy caption equals trace_greedy's record (the analysis' data)."""
    import torch
    from PIL import Image

    from catcap.decoding import GenerationConfig
    from catcap.viz.history import trace_greedy

    with Image.open(trained[1][2]) as im:
        image = im.convert("RGB")
    result = model.caption(image, GenerationConfig(num_beams=1, max_length=10))
    cap = model.captioner
    x = torch.from_numpy(model.features(image))[None]
    mask = torch.ones(x.shape[:2], dtype=torch.bool)
    trace = trace_greedy(cap.model, x, mask, -1, 10, cap.vocab, keep_maps=True)
    steps = int(trace.active[0].sum())
    assert [cap.vocab.word(i) for i in trace.tokens[0, :steps].tolist()] == result["tokens"]
    np.testing.assert_allclose(result["attention"].regions, trace.region[0, :steps].numpy(), atol=1e-5)
    np.testing.assert_allclose(result["attention"].history_weight,
                               trace.history_weight[0, :, :steps].mean(0).numpy(), atol=1e-5)


def test_a_sample_is_captioned_by_name_and_served(client, trained):
    photo = trained[1][0]
    answer = client.post("/api/caption", data={"sample": photo.name, "beam": "1"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["caption"] == api.caption(trained[0], [str(photo)], num_beams=1, max_length=20)[0][1]
    assert client.get(f"/samples/{photo.name}").content == photo.read_bytes()
    assert client.get("/samples/..%2Fdata.json").status_code == 404
    page = client.get("/").text
    assert photo.name in page and "/*CATCAP_CONFIG*/" not in page and "<script src" not in page


BAD = {  # case -> (bytes, declared type, status, code, words the message must contain)
    "not_an_image": (b"hello, this is text", "image/jpeg", 415, "not_an_image", "not an image"),
    "empty": (b"", "image/jpeg", 400, "empty_upload", "0 bytes"),
    "wrong_content_type": (None, "text/plain", 415, "wrong_content_type", "text/plain"),
    "huge_pixel_header": (png_header(100_000, 100_000), "image/png", 413, "too_many_pixels", "pixels"),
    "over_max_pixels": ("big", "image/png", 413, "too_many_pixels", "2500 x 2000"),
    "gif": (image_bytes("GIF"), "image/gif", 415, "wrong_content_type", "image/gif"),
    "gif_as_octet_stream": (image_bytes("GIF"), "application/octet-stream", 415, "unsupported_type", "GIF"),
    "truncated_jpeg": ("truncated", "image/jpeg", 400, "broken_image", "truncated"),
    "too_large": (b"\xff\xd8" + b"\0" * (1024 * 1024 + 10), "image/jpeg", 413, "too_large", "1,048,588 bytes"),
    "far_too_large": (b"\xff\xd8" + b"\0" * (3 * 1024 * 1024), "image/jpeg", 413, "too_large", "MB"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_upload_gets_a_4xx_json_error_saying_what_to_fix(client, trained, case):
    data, kind, status, code, words = BAD[case]
    photo = trained[1][0].read_bytes()
    if data is None:
        data = photo
    elif data == "truncated":
        data = photo[: len(photo) // 3]
    elif data == "big":
        data = image_bytes("PNG", size=(2500, 2000))
    answer = post_photo(client, data, "upload.bin", kind)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["status"] == status
    assert words in error["found"] and error["expected"] and error["fix"]
    assert error["message"].startswith(error["found"])
    assert post_photo(client, photo, beam=1, max_length=4).status_code == 200  # the server carries on


def test_requests_that_are_not_a_photo_upload_are_refused_clearly(client):
    answer = client.post("/api/caption", content=json.dumps({"image": "x"}),
                         headers={"content-type": "application/json"})
    assert answer.status_code == 415 and "multipart/form-data" in answer.json()["error"]["expected"]
    answer = client.post("/api/caption", data={"beam": "2"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "no_image"
    answer = post_photo(client, image_bytes("PNG"), "a.png", "image/png", beam=0)
    assert answer.status_code == 422 and "from 1 to 10" in answer.json()["error"]["expected"]
    answer = post_photo(client, image_bytes("PNG"), "a.png", "image/png", max_length="many")
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "bad_max_length"


def test_a_body_without_a_length_is_cut_off_at_the_limit(client, trained):
    """A chunked upload (no Content-Length) is counted while it streams in and refused at the limit."""
    def chunks():
        yield b"--b\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.jpg\"\r\n\r\n"
        for _ in range(40):
            yield b"\0" * 65536  # 2.5 MB, over the 1 MB + form allowance
        yield b"\r\n--b--\r\n"

    answer = client.post("/api/caption", content=chunks(), headers={"content-type": "multipart/form-data; boundary=b"})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "too_large"
    assert "more than" in answer.json()["error"]["found"]
    assert post_photo(client, trained[1][0].read_bytes(), beam=1, max_length=4).status_code == 200


def test_a_request_over_its_time_limit_is_a_504_and_the_server_carries_on(model):
    with TestClient(create_app(model, limits=Limits(timeout_s=0.001))) as client:
        answer = post_photo(client, image_bytes("PNG", (320, 240)), "a.png", "image/png")
        assert answer.status_code == 504, answer.text
        assert answer.json()["error"]["code"] == "timeout" and "0.001 s" in answer.json()["error"]["found"]
        assert client.get("/health").json()["queue"]["timed_out"] == 1


def test_a_real_server_captions_refuses_bad_input_and_bounds_its_queue(trained, tmp_path, monkeypatch):
    """The default --backend auto: ONNX Runtime where onnxruntime, onnx and onnxscript are installed
    (exported into a fresh cache folder here, not the user's), else PyTorch."""
    import importlib.util

    checkpoint, photos = trained
    monkeypatch.setenv("CATCAP_CACHE_DIR", str(tmp_path / "cache"))  # inherited by the server process
    onnx = all(importlib.util.find_spec(m) for m in ("onnxruntime", "onnx", "onnxscript"))
    port = free_port()
    proc = start_server(["serve", "--checkpoint", str(checkpoint), "--port", str(port), "--queue", "1",
                         "--samples", str(photos[0].parent)], port, tmp_path / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        status, body = post_multipart(f"{base}/api/caption", photos[1].read_bytes(), photos[1].name, "image/jpeg",
                                      {"beam": "1"})
        assert status == 200 and body["caption"] and len(body["attention"]["regions"]) == len(body["tokens"])
        status, body = post_multipart(f"{base}/api/caption", b"GIF89a not really", "a.gif", "image/jpeg")
        assert status == 415 and body["error"]["code"] == "not_an_image"

        # a burst of 12 at once against 1 running + 1 waiting: every request answered, 200 or 503
        answers, barrier = [None] * 12, threading.Barrier(12)

        def one(i):
            barrier.wait()
            answers[i] = post_multipart(f"{base}/api/caption", photos[i % 6].read_bytes(), "p.jpg", "image/jpeg",
                                        {"beam": "3"})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        codes = [a[0] for a in answers]
        assert set(codes) <= {200, 503} and codes.count(200) >= 2 and codes.count(503) >= 1, codes
        busy = next(a[1] for a in answers if a[0] == 503)["error"]
        assert busy["code"] == "busy" and "1 running + 1 waiting" in busy["expected"] and "--queue" in busy["fix"]

        health = get_json(f"{base}/health")
        assert health["status"] == "ok" and health["model_loads"] == 1
        assert health["model"]["backend"] == ("onnx" if onnx else "torch")
        assert health["queue"]["served"] == 1 + codes.count(200) and health["queue"]["refused"] == codes.count(503)
        assert proc.poll() is None
    finally:
        stop_server(proc)


def test_a_model_without_attention_weights_gets_its_caption_and_a_note(trained, tmp_path):
    """A Transformer (vanilla cross attention reports no weights) on the same photo features."""
    import torch

    from catcap.config import to_dict
    from catcap.data.features import open_feature_store
    from catcap.data.vocab import Vocab
    from catcap.models.config import ModelConfig
    from catcap.training.checkpoint import save_checkpoint
    from catcap.training.experiment import ExperimentConfig
    from catcap.training.setup import make_model

    checkpoint, photos = trained
    with open_feature_store(checkpoint.parents[1] / "feats.h5") as store:
        meta = store.meta
    cfg = ExperimentConfig(model=ModelConfig(feature_dim=1280, d_model=16, num_heads=2, encoder_layers=1,
                                             decoder_layers=1, d_ff=32, cross_attention="vanilla"))
    vocab = Vocab([f"w{i}" for i in range(12)])
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "plain", model=make_model(cfg, vocab), config=to_dict(cfg), vocab=vocab.to_dict(),
                    features=meta)
    with TestClient(create_app(tmp_path / "plain", backend="torch", log_fn=lambda m: None)) as client:
        answer = post_photo(client, photos[0].read_bytes(), beam=1, max_length=5)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["caption"] == api.caption(tmp_path / "plain", [str(photos[0])], num_beams=1, max_length=5)[0][1]
    att = body["attention"]
    assert att["regions"] is None and att["history_weight"] is None and att["history"] is None
    assert att["note"] == ("This Transformer model does not record where in the photo each word came from, so "
                           "there is no map to show. CAT models do.") and len(att["boxes"]) == 49
    assert body["model"]["name"] == "Transformer"


def test_a_checkpoint_that_cannot_read_photos_is_refused_by_the_cli(tmp_path, capsys):
    import torch

    from catcap.cli.main import main
    from catcap.config import to_dict
    from catcap.data.vocab import Vocab
    from catcap.models.config import ModelConfig
    from catcap.training.checkpoint import save_checkpoint
    from catcap.training.experiment import ExperimentConfig
    from catcap.training.setup import make_model

    cfg = ExperimentConfig(model=ModelConfig(feature_dim=2048, d_model=16, num_heads=2, encoder_layers=1,
                                             decoder_layers=1, d_ff=32))
    vocab = Vocab([f"w{i}" for i in range(10)])
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ckpt", model=make_model(cfg, vocab), config=to_dict(cfg), vocab=vocab.to_dict(),
                    features={"source_format": "tsv"})
    assert main(["serve", "--checkpoint", str(tmp_path / "ckpt"), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "cannot caption photos" in err and "catcap extract" in err


def test_a_missing_web_extra_names_the_install_command(monkeypatch):
    import importlib.util

    from catcap.web.serve import check_web_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    with pytest.raises(ValueError, match=r"missing package\(s\) uvicorn; .*pip install -e '\.\[web\]'"):
        check_web_extra()


def test_the_help_examples_are_commands_the_parser_accepts():
    from help_examples import example_commands, parse_example

    from catcap.cli.serve_cmds import SERVE_HELP

    commands = example_commands(SERVE_HELP)
    assert len(commands) == 4 and commands[0] == ["serve"]
    for argv in commands:
        assert parse_example(argv).command == "serve"


def test_a_16_bit_grey_png_is_scaled_to_8_bits_not_clipped_white():
    """The upload path decodes like `catcap extract` (efficientnet.to_rgb): a 16-bit grey value v
    becomes v / 257 (65535 -> 255), where PIL's own convert("RGB") clips everything >= 255."""
    from PIL import Image

    from catcap.web.serve_limits import decode_image

    values = np.array([[0, 257 * 100], [257 * 200, 65535]], dtype=np.uint16)
    buf = io.BytesIO()
    Image.fromarray(values).save(buf, format="PNG")
    rgb = np.asarray(decode_image(Image.open(io.BytesIO(buf.getvalue())), "grey16.png"))
    np.testing.assert_array_equal(rgb[..., 0], [[0, 100], [200, 255]])
    assert (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all()
