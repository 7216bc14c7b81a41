"""`catcap extract` as a user runs it: --dataset keys images by id, --backend onnx, clear errors."""

import json
from pathlib import Path

import pytest

from catcap.cli.main import main
from catcap.data.features import open_feature_store


def _dataset(tmp_path, names, split="train"):
    images = [{"filename": n, "imgid": int(n.split("_")[0]), "split": split,
               "sentences": [{"raw": "a dog runs on the grass"}]} for n in names]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": images}))
    return path


def test_dataset_images_are_keyed_by_id_with_the_onnx_backend(flickr8k_images, onnx_cache_root, tmp_path,
                                                              monkeypatch, capsys):
    monkeypatch.setenv("CATCAP_CACHE_DIR", str(onnx_cache_root))
    names = [p.name for p in sorted(flickr8k_images.glob("*.jpg"))[:3]]
    dataset = _dataset(tmp_path, names)
    out = tmp_path / "f.h5"
    rc = main(["extract", "--images", str(flickr8k_images), "--dataset", str(dataset), "--out", str(out),
               "--backend", "onnx", "--workers", "0", "--quiet"])
    assert rc == 0 and "3 images extracted" in capsys.readouterr().out
    with open_feature_store(out) as store:
        assert sorted(store.keys()) == sorted(n.split("_")[0] for n in names)  # ids, not file stems
        assert store.meta["encoder"] == "efficientnet-lite0" and store.meta["keys"] == "image-id"
    assert list((onnx_cache_root / "onnx").glob("efficientnet-lite0-*.onnx"))


def test_a_missing_dataset_image_stops_before_anything_runs(flickr8k_images, tmp_path, capsys):
    names = [sorted(flickr8k_images.glob("*.jpg"))[0].name, "123_missing.jpg"]
    rc = main(["extract", "--images", str(flickr8k_images), "--dataset", str(_dataset(tmp_path, names)),
               "--out", str(tmp_path / "f.h5"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "1 image of" in err and "is not in" in err and "123_missing.jpg" in err and "--images" in err
    assert not (tmp_path / "f.h5").exists() and not (tmp_path / "f.h5.partial").exists()


def test_bad_backend_and_output_are_refused_with_a_message(flickr8k_images, tmp_path, capsys):
    rc = main(["extract", "--images", str(flickr8k_images), "--out", str(tmp_path / "f.npz"), "--quiet"])
    assert rc == 2 and ".h5" in capsys.readouterr().err


def _commands(text: str) -> list[str]:
    """The `catcap extract` commands of a help text or a markdown file, continuation lines joined."""
    commands, current = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if current is not None:
            current += " " + stripped.rstrip("\\").strip()
        elif stripped.startswith("catcap extract"):
            current = stripped.rstrip("\\").strip()
        if current is not None and not stripped.endswith("\\"):
            commands.append(current)
            current = None
    return commands


def _check_examples(commands: list[str]) -> None:
    assert commands
    for cmd in commands:
        assert cmd.count("catcap extract") == 1, cmd  # one example per line (no eaten newline)
        if "flickr8k" in cmd.split("--out", 1)[1]:  # the recipe's store must be keyed by image id
            assert "--dataset" in cmd, cmd
    assert any("--dataset" not in cmd and "flickr8k" not in cmd for cmd in commands)  # a folder of photos


def test_help_examples_are_runnable_and_recipe_paths_use_dataset(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["extract", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    examples = text.split("examples:", 1)[1].split("options:", 1)[0]
    assert "\\\n" in examples  # the line continuation is printed, newline kept
    _check_examples(_commands(examples))
    assert "best on a 2-core" not in text and "default 2" in " ".join(text.split())


def test_docs_examples_use_dataset_for_the_recipe():
    docs = Path(__file__).resolve().parents[2] / "docs" / "features.md"
    _check_examples(_commands(docs.read_text(encoding="utf-8")))
