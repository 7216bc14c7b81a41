"""Tiny hand-made inputs of the report and human-evaluation tests: a Karpathy-format dataset,
two result files and small real images (Pillow-drawn PNGs), written into a test's folder."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image, ImageDraw

COLOURS = ["red", "green", "blue", "purple", "orange", "teal", "olive", "navy", "maroon", "gold", "gray", "pink"]


def draw(path: Path, colour: str, shape: str, size=(320, 240)) -> None:
    """A white picture with one coloured circle or square."""
    img = Image.new("RGB", size, "white")
    pen = ImageDraw.Draw(img)
    box = (size[0] // 3, size[1] // 4, 2 * size[0] // 3, 3 * size[1] // 4)
    (pen.ellipse if shape == "circle" else pen.rectangle)(box, fill=colour)
    img.save(path)


def write_dataset(folder: Path, captions: dict[int, list[str]], split: str = "test") -> Path:
    """A Karpathy split file whose image ``cocoid`` ``k`` has references ``captions[k]`` and file
    ``img<k>.png``; also one image of another split (never captioned)."""
    images = [{"imgid": i, "cocoid": k, "filename": f"img{k}.png", "split": split,
               "sentences": [{"raw": r} for r in refs]} for i, (k, refs) in enumerate(captions.items())]
    images.append({"imgid": len(images), "cocoid": 999, "filename": "img999.png", "split": "train",
                   "sentences": [{"raw": "a training picture"}]})
    path = folder / "dataset_tiny.json"
    path.write_text(json.dumps({"images": images}), encoding="utf-8")
    return path


def write_results(path: Path, captions: dict[int, str]) -> Path:
    path.write_text(json.dumps([{"image_id": k, "caption": c} for k, c in captions.items()]), encoding="utf-8")
    return path


def write_images(folder: Path, ids) -> Path:
    """``img<k>.png`` for every id, alternating circles and squares in different colours."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, k in enumerate(ids):
        draw(folder / f"img{k}.png", COLOURS[n % len(COLOURS)], "circle" if n % 2 == 0 else "square")
    return folder


def study_inputs(folder: Path, count: int = 12, only_a: int = 0) -> dict:
    """Inputs of a study: ``count`` images captioned by A, all but the last ``only_a`` by B."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = list(range(100, 100 + count))
    refs = {k: [f"a {COLOURS[n % 12]} {'circle' if n % 2 == 0 else 'square'} on white",
                f"a {'round' if n % 2 == 0 else 'square'} {COLOURS[n % 12]} shape"] for n, k in enumerate(ids)}
    a = {k: f"a {COLOURS[n % 12]} shape" for n, k in enumerate(ids)}
    b = {k: f"a {COLOURS[n % 12]} {'circle' if n % 2 == 0 else 'square'} on white <b>&</b>"
         for n, k in enumerate(ids[:count - only_a])}
    return {"a": write_results(folder / "a.json", a), "b": write_results(folder / "b.json", b),
            "refs": write_dataset(folder, refs), "images": write_images(folder / "images", ids),
            "captions_a": a, "captions_b": b}


def check_example_values(argv: list[str], args) -> None:
    """Every ``--flag value`` of a help example is parsed to that value (as text or number)."""
    for flag, value in zip(argv, argv[1:]):
        if flag.startswith("--") and not value.startswith("--"):
            parsed = getattr(args, flag[2:].replace("-", "_"))
            assert parsed in (value, int(value) if value.isdigit() else value), (flag, value, parsed)
