"""Damaged files are refused by name, never loaded silently; nothing in src/ unpickles.

Oracles: damage made by hand (a file cut short, one bit flipped at a known offset, a value edited
in valid JSON) must give an error naming the damaged file; an undamaged copy loads to the values
saved. The unpickling scan parses every module of src/ (AST, import aliases resolved) and is
itself checked on snippets that do unpickle."""

import ast
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from catcap.data.features import FeatureStoreError, HDF5FeatureWriter, NpzDirFeatureWriter, open_feature_store
from catcap.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

SRC = Path(__file__).resolve().parents[2] / "src"


def flip_bit(path: Path, offset: int, bit: int = 3) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    return save_checkpoint(tmp_path / "ckpt", model=torch.nn.Linear(30, 20), config={"model": {"d_model": 32}},
                           vocab={"tokens": ["<pad>", "a", "dog"]},
                           trainer={"optimizer": {"m": torch.ones(50)}, "position": {"step": 3}})


def test_a_checkpoint_records_the_sha256_of_every_file(ckpt):
    import hashlib

    meta = json.loads((ckpt / "config.json").read_text())
    files = sorted(p.name for p in ckpt.iterdir() if p.name != "config.json")
    assert sorted(k for k in meta["sha256"] if k != "content") == files
    for name in files:
        assert meta["sha256"][name] == hashlib.sha256((ckpt / name).read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["model.safetensors", "trainer.safetensors"])
def test_a_bit_flipped_tensor_file_is_refused_by_name(ckpt, name):
    path = ckpt / name
    header = 8 + int.from_bytes(path.read_bytes()[:8], "little")
    flip_bit(path, header + 17)  # inside the tensor data: safetensors itself would load it
    with pytest.raises(CheckpointError, match="does not match the sha256") as info:
        load_checkpoint(ckpt, with_trainer=True)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name, old, new", [("vocab.json", '"dog"', '"cat"'), ("trainer.json", '"step"', '"stop"'),
                                            ("config.json", '"d_model": 32', '"d_model": 64')])
def test_an_edited_json_file_is_refused_by_name(ckpt, name, old, new):
    path = ckpt / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))  # still valid JSON (and a valid config): only the hash can tell
    with pytest.raises(CheckpointError, match="does not match the sha256") as info:
        load_checkpoint(ckpt, with_trainer=True)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name", ["model.safetensors", "trainer.safetensors", "vocab.json", "trainer.json"])
def test_a_truncated_checkpoint_file_is_refused_by_name(ckpt, name):
    data = (ckpt / name).read_bytes()
    (ckpt / name).write_bytes(data[: len(data) - 3])
    with pytest.raises(CheckpointError, match="the checkpoint is damaged") as info:
        load_checkpoint(ckpt, with_trainer=True)
    assert str(ckpt / name) in str(info.value)


def test_a_checkpoint_written_before_the_hashes_still_loads(ckpt):
    meta = json.loads((ckpt / "config.json").read_text())
    del meta["sha256"]
    (ckpt / "config.json").write_text(json.dumps(meta))
    back = load_checkpoint(ckpt, with_trainer=True)
    assert back["vocab"]["tokens"] == ["<pad>", "a", "dog"] and back["trainer"]["position"]["step"] == 3


# -- feature stores -----------------------------------------------------------------------------

def _hdf5(tmp_path):
    path = tmp_path / "f.h5"
    rng = np.random.default_rng(0)
    with HDF5FeatureWriter(path, 8, {"encoder": "test"}) as w:
        for k in ("1", "2", "3"):
            w.write(k, rng.normal(size=(5, 8)).astype(np.float32), rng.uniform(size=(5, 4)).astype(np.float32))
    return path


def test_a_bit_flip_in_an_hdf5_store_is_refused_naming_the_file_and_the_image(tmp_path):
    path = _hdf5(tmp_path)
    with h5py.File(path, "r") as f:
        offset = f["images/2/regions"].id.get_offset()
    flip_bit(path, offset + 6)
    with open_feature_store(path) as store:
        store.get("1"), store.get("3")  # the other images are fine
        with pytest.raises(FeatureStoreError, match=r"image '2' do not match the sha256") as info:
            store.get("2")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("keep", [0.3, 0.9])
def test_a_truncated_hdf5_store_is_refused_by_name(tmp_path, keep):
    path = _hdf5(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(FeatureStoreError) as info:
        with open_feature_store(path) as store:
            for key in store.keys():
                store.get(key)
    assert str(path) in str(info.value)


def test_an_hdf5_store_written_before_the_hashes_still_reads(tmp_path):
    path = _hdf5(tmp_path)
    with h5py.File(path, "a") as f:
        for key in f["images"]:
            del f["images"][key].attrs["sha256"]
    with open_feature_store(path) as store:
        assert store.get("2").regions.shape == (5, 8)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_npz_image_is_refused_by_name(tmp_path, damage):
    path = tmp_path / "f"
    with NpzDirFeatureWriter(path, 8, {}) as w:
        w.write("7", np.arange(40, dtype=np.float32).reshape(5, 8))
    npz = path / "7.npz"
    if damage == "flip":
        data = npz.read_bytes()
        flip_bit(npz, data.index(np.arange(40, dtype=np.float32).tobytes()) + 30)  # zip's CRC-32 catches it
    else:
        npz.write_bytes(npz.read_bytes()[:-30])
    with open_feature_store(path) as store, pytest.raises(FeatureStoreError, match="cannot be read") as info:
        store.get("7")
    assert str(npz) in str(info.value)


# -- no unpickling anywhere in src/ ----------------------------------------------------------------

PICKLE_LOADERS = {"pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.load", "_pickle.loads", "dill.load",
                  "dill.loads", "joblib.load", "pandas.read_pickle", "cloudpickle.load", "cloudpickle.loads",
                  "shelve.open", "numpy.lib.format.read_array_header_1_0"}


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> full dotted name, from every import of the module (function-level ones too)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([names.get(node.id, node.id), *reversed(parts)])


def _is_const(call: ast.Call, keyword: str, value) -> bool | None:
    """True/False when ``keyword`` is given as that constant / something else; None when absent."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return isinstance(kw.value, ast.Constant) and kw.value.value is value
    return None


def unpickling_calls(source: str, filename: str = "<src>") -> list[str]:
    """Every call in ``source`` that can unpickle: pickle & co., torch.load without
    weights_only=True, numpy.load with allow_pickle other than False; also ``**kwargs`` into them."""
    tree = ast.parse(source, filename)
    names, found = _aliases(tree), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func, names)
        where = f"{filename}:{node.lineno}"
        if name in PICKLE_LOADERS:
            found.append(f"{where} {name}")
        elif name == "torch.load" and _is_const(node, "weights_only", True) is not True:
            found.append(f"{where} torch.load without weights_only=True")
        elif name in ("numpy.load", "numpy.lib.npyio.load") and _is_const(node, "allow_pickle", False) is False:
            found.append(f"{where} numpy.load with allow_pickle not False")
        elif name in ("torch.load", "numpy.load") and any(kw.arg is None for kw in node.keywords):
            found.append(f"{where} {name}(**kwargs)")
    return found


@pytest.mark.parametrize("snippet", [
    "import pickle\npickle.load(f)", "import pickle as p\np.loads(b)", "from pickle import load\nload(f)",
    "from pickle import loads as l\nl(b)", "import torch\ntorch.load(p)", "import torch\ntorch.load(p, weights_only=False)",
    "from torch import load\nload(p, map_location='cpu')", "import numpy as np\nnp.load(p, allow_pickle=True)",
    "import numpy\nnumpy.load(p, allow_pickle=flag)", "import joblib\njoblib.load(p)", "import pandas as pd\npd.read_pickle(p)",
    "def f():\n    import pickle\n    return pickle.Unpickler(f).load()",
])
def test_the_scan_finds_unpickling(snippet):
    assert unpickling_calls(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "import torch\ntorch.load(p, map_location='cpu', weights_only=True)", "import numpy as np\nnp.load(p)",
    "import numpy as np\nnp.load(p, allow_pickle=False)", "import json\njson.load(f)", "import pickle\npickle.dumps(x)",
])
def test_the_scan_lets_safe_loading_pass(snippet):
    assert unpickling_calls(snippet) == []


def test_no_code_path_in_src_unpickles():
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 100
    found = [hit for path in modules for hit in unpickling_calls(path.read_text(encoding="utf-8"), str(path))]
    assert found == [], "\n".join(found)


# -- the run log: appended, so a kill can tear its last line ---------------------------------------

def test_log_readers_skip_a_torn_last_line_and_name_a_damaged_one(tmp_path):
    from catcap.training import runlog
    from catcap.viz.training_curves import read_log

    records = [{"kind": "train", "step": s, "epoch": 0, "loss": 1.0 / s} for s in (1, 2, 3)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    log = tmp_path / runlog.LOG_NAME
    log.write_text(text + '{"kind": "train", "st')  # a kill in the middle of the 4th record
    assert read_log(log) == (records, [])
    assert runlog.rewind(tmp_path, step=2, epoch=0) == 2  # the torn line and step 3
    assert [json.loads(line) for line in log.read_text().splitlines()] == records[:2]
    log.write_text(text.replace('"step": 2', '"st', 1))  # damage that is not a torn last line
    with pytest.raises(ValueError, match=r"line 2: not a JSON record"):
        read_log(log)
