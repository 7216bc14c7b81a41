"""One cache folder for everything catcap caches (metric jars, ONNX exports, course data)."""

from pathlib import Path

from catcap.cache import cache_root
from catcap.features.onnx_backend import cache_dir as onnx_cache
from catcap.metrics.java import user_cache_dir
from mml.paths import data_dir


def test_catcap_cache_dir_wins_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("MML_DATA_DIR", raising=False)
    monkeypatch.setenv("CATCAP_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "mine"
    assert user_cache_dir() == tmp_path / "mine" and onnx_cache() == tmp_path / "mine" / "onnx"
    assert data_dir() == tmp_path / "mine" / "mml" / "coco_captioning"
    monkeypatch.delenv("CATCAP_CACHE_DIR")
    assert cache_root() == tmp_path / "xdg" / "catcap" == user_cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: absolute paths only
    assert cache_root() == Path.home() / ".cache" / "catcap"
