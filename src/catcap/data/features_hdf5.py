"""The HDF5 feature store (the default format) and its writer.

See :mod:`catcap.data.features` for the layout. Each image's group carries the attribute
``sha256`` (:func:`~catcap.data.feature_base.content_sha256` of its arrays), checked every time
the image is read: hashing a whole multi-GB store on open would cost minutes, one image's
check ~0.2 ms (a 49 x 1280 grid). Stores written before the attribute existed are read unchecked.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import h5py

from catcap.data.feature_base import (
    REPLACE_ADVICE, FeatureStoreError, ImageFeatures, PathLike, _StoreBase, _WriterBase, _missing,
    content_sha256, escape_key, read_header, unescape_key, validate_features,
)

FORMAT = "catcap-features-v1"


class HDF5FeatureStore(_StoreBase):
    """Read-only HDF5 feature file (the default format). See the module docstring."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"feature file {self.path} does not exist; "
                                    "extract features first or fix the path")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as e:
            raise FeatureStoreError(f"{self.path} is not an HDF5 file ({e}); expected a catcap "
                                    f"feature file ({FORMAT})") from None
        try:
            self.feature_dim, self.meta = _read_header(self._file, self.path)
        except Exception:
            self._file.close()
            raise
        self._pid = os.getpid()

    @property
    def _images(self) -> "h5py.Group":
        """/images, reopened in a new process (forked or spawned DataLoader worker): HDF5
        handles must not cross processes."""
        if self._pid != os.getpid():
            self._file, self._pid = h5py.File(self.path, "r"), os.getpid()
        return self._file["images"]

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_file", "_pid")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _file=None, _pid=None)

    def keys(self) -> list[str]:
        return [unescape_key(n) for n in self._images.keys()]

    def __len__(self) -> int:
        return len(self._images)

    def __contains__(self, key: str) -> bool:
        return isinstance(key, str) and key != "" and escape_key(key) in self._images

    def get(self, key: str) -> ImageFeatures:
        """``ImageFeatures`` of one image; FeatureStoreError names the image if its values are bad."""
        if key not in self:
            raise _missing(key, self.path)
        try:
            group = self._images[escape_key(key)]
            regions = group["regions"][()]
            boxes = group["boxes"][()] if "boxes" in group else None
            expected = group.attrs.get("sha256")
        except (OSError, RuntimeError, KeyError, ValueError) as err:
            raise FeatureStoreError(f"{self.path}: image {key!r} cannot be read ({_first_line(err)}); the feature "
                                    "file is damaged (a copy cut short?): copy or extract it again") from None
        feats = validate_features(key, regions, boxes, self.feature_dim)
        if expected is not None:
            expected = expected.decode() if isinstance(expected, bytes) else str(expected)
            if content_sha256(ImageFeatures(regions, boxes)) != expected:
                raise FeatureStoreError(f"{self.path}: the features of image {key!r} do not match the sha256 stored "
                                        "with them; the feature file is damaged (a bit flip?): copy or extract it again")
        return feats

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _read_header(f: "h5py.File", path, advice: str = "convert it with HDF5FeatureWriter") -> tuple[int, dict]:
    found = f.attrs.get("format")
    found = found.decode() if isinstance(found, bytes) else found
    if found != FORMAT or "images" not in f:
        raise FeatureStoreError(f"{path} is an HDF5 file but not a catcap feature file: expected "
                                f"attribute format={FORMAT!r} and a group /images, found "
                                f"format={found!r}, top-level {sorted(f.keys())[:5]}; {advice}")
    return read_header(path, f.attrs.get("feature_dim"), f.attrs.get("meta", "{}"), "attribute feature_dim",
                       "attribute meta")


def _inspect(path: Path, name: Path) -> tuple[int, dict]:
    """(feature_dim, meta) of the store at ``path`` (called ``name`` in messages) that a writer is
    about to continue, read without writing a byte: anything that is not a readable catcap HDF5
    feature file is refused with a short FeatureStoreError and left exactly as it was."""
    if not h5py.is_hdf5(path):
        raise FeatureStoreError(f"cannot resume {name}: expected a catcap HDF5 feature file, found "
                                f"{_describe_file(path)}; {REPLACE_ADVICE}")
    try:
        with h5py.File(path, "r") as f:
            header = _read_header(f, name, advice=REPLACE_ADVICE)
            len(f["images"])  # the index of images must be readable too
            return header
    except FeatureStoreError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as err:
        raise FeatureStoreError(f"cannot resume {name}: it is a damaged HDF5 file ({_first_line(err)}); "
                                f"{REPLACE_ADVICE}") from None


def _describe_file(path: Path) -> str:
    if path.is_dir():
        return "a directory"
    size = path.stat().st_size
    if size == 0:
        return "an empty file"
    with open(path, "rb") as f:
        head = f.read(16)
    return f"a {size}-byte file that is not HDF5 (it starts with {head!r})"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


class HDF5FeatureWriter(_WriterBase):
    """Write an HDF5 feature file atomically: ``with HDF5FeatureWriter(p, F, meta) as w: w.write(k, r)``."""

    flush_every = 200

    def _open(self, resume: bool) -> None:
        if resume:  # checked read-only first: a file that is refused is left byte-for-byte as it was
            self._check_header(*_inspect(self.partial, self._source))
        try:
            self._file = h5py.File(self.partial, "a" if resume else "w")
        except OSError as err:
            raise FeatureStoreError(f"cannot open {self._source} for writing ({_first_line(err)}); check that "
                                    "its folder is writable and that no other process has the file open") from None
        if not resume:
            try:
                self._file.attrs.update(format=FORMAT, feature_dim=self.feature_dim,
                                        meta=json.dumps(self.meta, sort_keys=True))
                self._file.create_group("images")
                self._file.flush()  # a run killed before its first flush leaves a .partial that resumes
            except (OSError, RuntimeError) as err:
                raise self._write_failed(err) from None
        self._images = self._file["images"]
        self._pending = 0

    def _write_failed(self, err: BaseException) -> OSError:
        """HDF5's error for a failed write (a full disk, a file size limit: h5py raises
        RuntimeError or OSError with the errno inside its text) as the OSError it is."""
        self._failed = True
        found = re.search(r"errno = (\d+)", str(err))
        code = int(found.group(1)) if found else errno.EIO
        return OSError(code, f"{os.strerror(code)} while writing HDF5", str(self._source))

    def _keys(self) -> list[str]:
        return [unescape_key(n) for n in self._images.keys()]

    def _put(self, name: str, feats: ImageFeatures) -> None:
        group = self._images.create_group(name)
        try:
            group.create_dataset("regions", data=feats.regions)
            if feats.boxes is not None:
                group.create_dataset("boxes", data=feats.boxes)
            group.attrs["sha256"] = content_sha256(feats)
        except BaseException as err:  # never leave half an image behind: a resumed run would skip it
            try:
                del self._images[name]
            except Exception:  # noqa: BLE001 (best effort; the original error is what matters)
                pass
            if isinstance(err, (OSError, RuntimeError)):
                raise self._write_failed(err) from None
            raise
        self._pending += 1
        if self._pending >= self.flush_every:  # bound what a killed process can lose
            try:
                self._file.flush()
            except (OSError, RuntimeError) as err:
                raise self._write_failed(err) from None
            self._pending = 0

    def _close(self) -> bool:
        if getattr(self, "_file", None) is None or not self._file.id.valid:
            return False
        try:
            self._file.close()
        except (OSError, RuntimeError) as err:
            if getattr(self, "_failed", False):  # closing after a failed write: that error is the one to report
                return False
            raise self._write_failed(err) from None
        return True
