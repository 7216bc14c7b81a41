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
