"""Where tests find the real Flickr8k files (../shared/data/flickr8k, never part of the
repository), and the human captions of named photos (importable as ``flickr8k_files``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLICKR8K = REPO.parent / "shared" / "data" / "flickr8k"


def flickr8k_captions(names: set[str]) -> dict[str, list[str]]:
    """The human captions of the named photos, from Flickr8k.token.txt ("name.jpg#i<TAB>caption")."""
    out: dict[str, list[str]] = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        key, _, text = line.partition("\t")
        name = key.split("#")[0]
        if name in names:
            out.setdefault(name, []).append(text.strip())
    return out


def bundled_model_path() -> str:
    """The folder of the bundled default model (``catcap caption`` without --checkpoint); skips
    the test when it or the image encoder's package is missing."""
    import pytest

    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    from catcap import api
    from catcap.zoo import ZooError

    try:
        return str(api.bundled_model().path)
    except ZooError as err:
        pytest.skip(f"no bundled zoo model: {err}")
