"""The npz-directory feature store and its writer.

See :mod:`catcap.data.features` for the layout.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from catcap.atomic import atomic_write, write_text_atomic
from catcap.data.feature_base import (
    FeatureStoreError, ImageFeatures, PathLike, _StoreBase, _WriterBase,
    _missing, escape_key, read_header, unescape_key, validate_features,
)

NPZ_FORMAT = "catcap-features-npz-v1"


class NpzDirFeatureStore(_StoreBase):
    """Read-only directory of ``<escaped key>.npz`` files plus ``meta.json``."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        self.feature_dim, self.meta = _read_meta_json(self.path)

    def keys(self) -> list[str]:
        return sorted(unescape_key(p.name[:-4]) for p in self.path.glob("*.npz"))

    def __contains__(self, key: str) -> bool:
        return isinstance(key, str) and key != "" and (self.path / f"{escape_key(key)}.npz").is_file()

    def get(self, key: str) -> ImageFeatures:
        """``ImageFeatures`` of one image; FeatureStoreError names the image if its values are bad."""
        if key not in self:
            raise _missing(key, self.path)
        path = self.path / f"{escape_key(key)}.npz"
        try:  # an .npz is a zip: every member carries a CRC-32 that reading checks
            with np.load(path, allow_pickle=False) as z:
                boxes = z["boxes"] if "boxes" in z.files else None
                regions = z["regions"]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            raise FeatureStoreError(f"{path}: image {key!r} cannot be read ({err}); the file is damaged "
                                    "(a copy cut short or a bit flip?): copy or extract it again") from None
        return validate_features(key, regions, boxes, self.feature_dim)

    def close(self) -> None:
        pass


def _read_meta_json(path: Path) -> tuple[int, dict]:
    if not (path / "meta.json").is_file():
        raise FeatureStoreError(f"{path} is not a catcap npz feature directory: expected "
                                f"{path / 'meta.json'}; write it with NpzDirFeatureWriter")
    try:
        head = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FeatureStoreError(f"{path / 'meta.json'}: not readable JSON ({err}); the feature directory is "
                                "damaged: copy or write it again") from None
    if not isinstance(head, dict) or head.get("format") != NPZ_FORMAT:
        found = head.get("format") if isinstance(head, dict) else type(head).__name__
        raise FeatureStoreError(f"{path / 'meta.json'}: expected format {NPZ_FORMAT!r}, found {found!r}")
    return read_header(path / "meta.json", head.get("feature_dim"), head.get("meta"), '"feature_dim"', '"meta"')


class NpzDirFeatureWriter(_WriterBase):
    """Write an npz feature directory (``<dir>.partial`` renamed to ``<dir>`` on a clean close)."""

    def _open(self, resume: bool) -> None:
        if resume:
            self._check_header(*_read_meta_json(self.partial))
            for stale in self.partial.glob("*.tmp"):
                stale.unlink()
        else:
            self.partial.mkdir(parents=True)
            head = {"format": NPZ_FORMAT, "feature_dim": self.feature_dim, "meta": self.meta}
            write_text_atomic(self.partial / "meta.json", json.dumps(head, indent=1, sort_keys=True))
        self._open_flag = True

    def _keys(self) -> list[str]:
        return [unescape_key(p.name[:-4]) for p in self.partial.glob("*.npz")]

    def _put(self, name: str, feats: ImageFeatures) -> None:
        target = self.partial / f"{name}.npz"
        if target.exists():  # e.g. keys differing only in case on a case-insensitive disk
            raise FeatureStoreError(f"{target} already exists; two keys map to the same file")
        arrays = {"regions": feats.regions} if feats.boxes is None else \
            {"regions": feats.regions, "boxes": feats.boxes}
        with atomic_write(target, "wb", durable=False) as f:  # no fsync per image; see catcap.atomic
            np.savez(f, **arrays)

    def _close(self) -> bool:
        was_open, self._open_flag = getattr(self, "_open_flag", False), False
        return was_open
